"""`kernel verify` holds a bundle to the manifest's schema (issue 37): the
headers package a listed file of headers/, the strings that reach config.txt
plain one-line names, the RT marker one rtforge writes, and the folder
nothing but plain folders and regular files of ordinary modes.  The deploy
side of each case runs on a simulated Pi in
tests/integration/test_deploy_hostile.py."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device.deploy.pitry import BLOCK_BEGIN, BLOCK_END, strip_block, with_block

from ...support.bootfiles import tiny_pi4_bundle

MODULES = "lib/modules/6.12.0-rt5"


def edit(root: Path, **changes) -> Path:
    m = json.loads((root / "manifest.json").read_text())
    m.update(changes)
    (root / "manifest.json").write_text(json.dumps(m))
    return root


def verify(path: Path, capsys) -> tuple[int, str]:
    status = main(["kernel", "verify", str(path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and len(out.err.strip().splitlines()) <= 1, out.err
    return status, out.err + out.out


def test_a_good_bundle_shows_its_manifests_sha256(tmp_path, capsys):
    b = tiny_pi4_bundle(tmp_path / "b")
    status, out = verify(b, capsys)
    assert status == 0 and hashlib.sha256((b / "manifest.json").read_bytes()).hexdigest() in out


@pytest.mark.parametrize("changes,words", [
    ({"headers": {"deb": "../../../../../tmp/x.deb"}}, "not headers/<name>.deb"),
    ({"headers": {"deb": "/tmp/x.deb"}}, "not headers/<name>.deb"),
    ({"headers": {"deb": "headers/x.deb"}}, "does not list"),
    ({"headers": {"deb": "headers/../boot/kernel8-rtforge.img"}}, "not headers/<name>.deb"),
    ({"headers": {"deb": None, "package": "linux-headers\narm_freq=1"}}, "not a plain name"),
    ({"headers": "headers/x.deb"}, "not an object"),
    ({"board": "pi4-64\narm_freq=9999\nover_voltage=8"}, "has a board"),
    ({"board": "pi4-64\r"}, "has a board"),
    ({"board": "pi4-64 # rtforge end"}, "has a board"),
    ({"arch": "arm64\n"}, "has a arch"),
    ({"uname_v_marker": ""}, "not one rtforge writes"),
    ({"uname_v_marker": "NOTRT"}, "not one rtforge writes"),
    ({"models": ["Raspberry Pi 4\nModel B"]}, "not plain names of one line"),
    ({"machines": ["aarch64 x"]}, "not plain names of one line"),
])
def test_a_manifest_outside_the_schema_is_refused(tmp_path, capsys, changes, words):
    status, err = verify(edit(tiny_pi4_bundle(tmp_path / "b"), **changes), capsys)
    assert status == 2 and words in err


def test_a_listed_headers_package_passes(tmp_path, capsys):
    b = tiny_pi4_bundle(tmp_path / "b")
    (b / "headers").mkdir()
    (b / "headers/linux-headers-6.12.0-rt5_1_arm64.deb").write_bytes(b"!<arch>\n")
    m = json.loads((b / "manifest.json").read_text())
    m["files"]["headers/linux-headers-6.12.0-rt5_1_arm64.deb"] = hashlib.sha256(b"!<arch>\n").hexdigest()
    m["headers"] = {"deb": "headers/linux-headers-6.12.0-rt5_1_arm64.deb", "package": "linux-headers-6.12.0-rt5",
                    "why": "linux-headers-6.12.0-rt5_1_arm64.deb: build programs for aarch64"}
    (b / "manifest.json").write_text(json.dumps(m))
    assert verify(b, capsys)[0] == 0


def _fifo(b: Path) -> None:
    os.mkfifo(b / MODULES / "pipe")


def _block(b: Path) -> None:
    os.mknod(b / MODULES / "sda", 0o660 | stat.S_IFBLK, os.makedev(8, 0))


def _mode(mode: int):
    return lambda b: (b / MODULES / "modules.dep").chmod(mode)


def _dir_link(b: Path) -> None:
    (b / MODULES / "kernel").symlink_to("/usr/lib")


def _open_dir(b: Path) -> None:
    (b / MODULES).chmod(0o777)


@pytest.mark.parametrize("damage,words", [
    (_fifo, "pipe is a FIFO, a device node or a socket"),
    pytest.param(_block, "sda is a FIFO, a device node or a socket", marks=pytest.mark.root),
    (_mode(0o4777), "modules.dep has mode 4777"),
    (_mode(0o2755), "modules.dep has mode 2755"),
    (_mode(0o646), "modules.dep has mode 646"),
    (_dir_link, "kernel is a symbolic link"),
    (_open_dir, "may be written by anyone"),
])
def test_a_bundle_folder_holds_only_plain_folders_and_regular_files(tmp_path, capsys, damage, words):
    """A FIFO or a block device node in the folder, or a listed module of
    mode 4777, passed `kernel verify` and were installed as such."""
    b = tiny_pi4_bundle(tmp_path / "b")
    damage(b)
    status, err = verify(b, capsys)
    assert status == 2 and words in err


@pytest.mark.parametrize("label", ["6.12 (pi4-64\narm_freq=9999\n# rtforge end)", "6.12 (pi4-64\rarm_freq=1)",
                                   "6.12 (pi4\x0c64)", "6.12 (pi4\u2028over_voltage=8)", "6.12 (pi4\x85x)"])
def test_a_label_stays_on_the_blocks_first_line(label):
    """Whatever a label holds, the block is its begin line, [all], its own
    lines and its end -- and the next deploy takes all of it out."""
    config = "dtparam=audio=on\n[all]\n"
    text = with_block(config, "kernel", label, ["kernel=kernel8-rtforge.img"])
    block = text[len(config):].split("\n")
    assert block[0].startswith(f"{BLOCK_BEGIN} kernel: ") and block[1:] == ["[all]", "kernel=kernel8-rtforge.img",
                                                                              BLOCK_END, ""]
    assert len(text.splitlines()) == len(config.splitlines()) + 4
    assert strip_block(text) == config
