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
