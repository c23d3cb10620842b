"""`kernel build --match` and the options of a build, from inputs rtforge
cannot trust (issue 37): a copy of a board's files whose files are FIFOs is
answered in seconds, a board's configuration takes no file of the build host
into the kernel, and no option value reaches Kbuild's make as a command.
Everything here stops before a tree is fetched: nothing is built."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device import LocalTransport
from rtforge.errors import UserError
from rtforge.kernel.build import BuildSpec, build_kernel
from rtforge.kernel.match import fixups
from rtforge.kernel.running import read_running

from ..support.runningboards import rpios

PI4 = "Raspberry Pi 4 Model B Rev 1.4"
RELEASE = "6.12.25+rpt-rpi-v8"


def board_copy(tmp_path: Path, config: str | None = 'CONFIG_LOCALVERSION=""\n', config_at: str = "boot") -> Path:
    return rpios(RELEASE, "aarch64", PI4, "arm64", config=config, config_at=config_at).write(tmp_path / "board")


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


# ---------------------------------------------------------------- 8. a board's files: regular, answered in seconds

@pytest.mark.parametrize("rel", [f"boot/config-{RELEASE}", "var/lib/dpkg/status"])
def test_a_fifo_in_a_sysroot_is_not_read(tmp_path, rel):
    """--match --sysroot with a FIFO boot/config-* blocked 120 s, then a
    TimeoutExpired traceback: a file that is not regular is not read."""
    root = board_copy(tmp_path)
    fifo(root / rel)
    start = time.monotonic()
    k = read_running(LocalTransport(), str(root))
    assert time.monotonic() - start < 10
    assert k.release == RELEASE
    if rel.startswith("boot/"):
        assert k.config is None
    else:
        assert k.package is None


def test_a_fifo_osrelease_is_one_sentence_at_once(tmp_path, capsys):
    root = board_copy(tmp_path)
    fifo(root / "proc/sys/kernel/osrelease")
    start = time.monotonic()
    rc = main(["kernel", "build", "--board", "pi4-64", "--match", "local", "--sysroot", str(root), "--config-only",
               "--dist", str(tmp_path / "dist")])
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "has no /proc/sys/kernel/osrelease" in err


# ---------------------------------------------------------------- 9. no file of the build host from a board's config

def test_a_boards_config_takes_no_file_of_the_build_host(tmp_path):
    """--match kept INITRAMFS_SOURCE, EXTRA_FIRMWARE and MODULE_SIG_KEY
    when a file of that name existed here: a board's configuration could
    pull /etc/shadow or a private key into the kernel that goes back to it."""
    key = tmp_path / "private-key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    tree = tmp_path / "tree"
    (tree / "certs").mkdir(parents=True)
    (tree / "certs" / "own.pem").write_text("x")
    config = {"INITRAMFS_SOURCE": '"/etc"', "EXTRA_FIRMWARE": '"passwd"', "EXTRA_FIRMWARE_DIR": '"/etc"',
              "MODULE_SIG_KEY": f'"{key}"', "SYSTEM_TRUSTED_KEYS": '"certs/own.pem"',
              "SYSTEM_REVOCATION_KEYS": '"../../../etc/passwd"', "SYSTEM_BLACKLIST_HASH_LIST": '"/etc/hostname"'}
    fixed = fixups(config, tree)
    assert {s: v for s, (v, _) in fixed.items()} == {
        "INITRAMFS_SOURCE": '""', "EXTRA_FIRMWARE": '""', "MODULE_SIG_KEY": '"certs/signing_key.pem"',
        "SYSTEM_REVOCATION_KEYS": '""', "SYSTEM_BLACKLIST_HASH_LIST": '""'}
    why = fixed["MODULE_SIG_KEY"][1]
    assert "this machine's file" in why and "-K CONFIG_MODULE_SIG_KEY" in why
    # a file the user names with -K is the user's to build in: left alone
    assert "MODULE_SIG_KEY" not in fixups(config, tree, {"MODULE_SIG_KEY"})


@pytest.mark.parametrize("how", ["-K", "-k", "board"])
def test_an_option_kbuild_would_run_is_refused_with_its_name(tmp_path, how, capsys):
    """A string option reached .config, where Kbuild's make expands it:
    CONFIG_LOCALVERSION="$(reboot)" from -K, a fragment or a board's config."""
    evil = 'CONFIG_LOCALVERSION="$(shell touch /tmp/rtforge-37-ran)"'
    argv = ["kernel", "build", "--board", "pi4-64", "--config-only", "--source", f"dir:{tmp_path / 'no-tree'}",
            "--dist", str(tmp_path / "dist")]
    if how == "-K":
        argv += ["-K", evil]
    elif how == "-k":
        (tmp_path / "mine.config").write_text('CONFIG_HZ_1000=y\nCONFIG_LOCALVERSION="`touch /tmp/rtforge-37-ran`"\n')
        argv += ["-k", str(tmp_path / "mine.config")]
    else:
        argv += ["--match", "local", "--sysroot", str(board_copy(tmp_path, config=f'CONFIG_X=y\n{evil}\n'))]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "CONFIG_LOCALVERSION=" in err and "Kbuild's make would run" in err, err
    assert not Path("/tmp/rtforge-37-ran").exists()


def test_the_library_refuses_it_too(tmp_path):
    with pytest.raises(UserError, match=r"-K sets CONFIG_LOCALVERSION=\"`reboot`\""):
        build_kernel(BuildSpec(board="pi4-64", source=f"dir:{tmp_path}", options=['CONFIG_LOCALVERSION="`reboot`"'],
                               config_only=True, dist=tmp_path / "dist"))
