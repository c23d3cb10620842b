"""Bundles from anywhere: a manifest must keep every path inside its bundle
(resolved with symbolic links), or `kernel verify` -- and everything else
that opens a bundle, the boot test included -- refuses it with one
sentence; damaged tarballs and unsafe members are one sentence too, never
"interrupted" (exit 130) or a traceback."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device.deploy.bundle import open_bundle, sha256_file
from rtforge.errors import UserError

from ...support.bootfiles import tiny_pi4_bundle

PASSWD = Path("/etc/passwd")


def manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def save(root: Path, m) -> None:
    (root / "manifest.json").write_text(json.dumps(m))


def verify(path: Path, capsys) -> tuple[int, str]:
    status = main(["kernel", "verify", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


def test_a_good_bundle_verifies(tmp_path, capsys):
    b = tiny_pi4_bundle(tmp_path / "b")
    assert verify(b, capsys)[0] == 0
    bundle = open_bundle(b)
    kernel = bundle.root / "boot" / bundle.image  # what kernel/boottest.py boots
    assert kernel.resolve().is_relative_to(b.resolve())


def _listed(rel: str, target: Path = PASSWD):
    def damage(root: Path):
        m = manifest(root)
        m["files"][rel] = sha256_file(target)
        save(root, m)
    return damage


def _link(rel: str, to: str, relist: bool = True):
    def damage(root: Path):
        p = root / rel
        if p.exists() or p.is_symlink():
            p.unlink()
        p.symlink_to(to)
        if relist:
            m = manifest(root)
            m["files"][rel] = sha256_file(p)  # its sha256 as it resolves: only the link gives it away
            save(root, m)
    return damage


def _boot_dir_link(root: Path):
    """boot/ itself a link to a folder outside holding a matching image."""
    outside = root.parent / "elsewhere"
    (root / "boot").rename(outside)
    (root / "boot").symlink_to(outside)


def _field(key, value):
    def damage(root: Path):
        m = manifest(root)
        m[key] = value
        save(root, m)
    return damage


ESCAPES = {
    "absolute path": _listed("/etc/passwd"),
    "dot-dot path": _listed("boot/../../../etc/passwd"),
    "dot-dot image": _field("image", "../../../etc/passwd"),
    "absolute image": _field("image", "/etc/passwd"),
    "image not listed": _field("image", "other.img"),
    "release with a slash": _field("kernelrelease", "../../etc"),
    "kernel a link out": _link("boot/kernel8-rtforge.img", "/etc/passwd"),
    "dtb a link out": _link("boot/bcm2711-rpi-4-b.dtb", "/etc/hostname"),
    "kernel a link inside": _link("boot/kernel8-rtforge.img", "bcm2711-rpi-4-b.dtb"),
    "boot folder a link": _boot_dir_link,
    "unlisted link": _link("boot/extra", "/etc/passwd", relist=False),
    "qemu dtb out": _field("qemu", {"machine": "raspi3b", "dtb": "../../etc/passwd"}),
}


@pytest.mark.parametrize("case", ESCAPES)
def test_paths_that_leave_the_bundle_are_refused(tmp_path, capsys, case):
    b = tiny_pi4_bundle(tmp_path / "b")
    ESCAPES[case](b)
    status, err = verify(b, capsys)
    assert status == 2 and err.count("\n") == 1, err
    with pytest.raises(UserError):
        bundle = open_bundle(b)
        bundle.verify()


SHAPES = {
    "a list": b"[1, 2]",
    "a string": b'"manifest"',
    "not UTF-8": b'{"board": "\xff\xfe"}',
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "huge number": b'{"manifest_version": ' + b"9" * 5000 + b"}",
    "version a string": None,
    "files a list": None,
    "machines a string": None,
    "pis a number": None,
    "qemu a list": None,
    "digest not hex": None,
}


@pytest.mark.parametrize("case", SHAPES)
def test_manifests_of_the_wrong_shape_are_one_sentence(tmp_path, capsys, case):
    b = tiny_pi4_bundle(tmp_path / "b")
    m = manifest(b)
    edits = {
        "version a string": ("manifest_version", "1"),
        "files a list": ("files", ["boot/x"]),
        "machines a string": ("machines", "aarch64"),
        "pis a number": ("pis", 4),
        "qemu a list": ("qemu", ["raspi3b"]),
        "digest not hex": ("files", {k: "z" * 64 for k in m["files"]}),
    }
    if SHAPES[case] is None:
        key, value = edits[case]
        m[key] = value
        save(b, m)
    else:
        (b / "manifest.json").write_bytes(SHAPES[case])
    status, err = verify(b, capsys)
    assert status == 2 and err.startswith("rtforge: error: ") and err.count("\n") == 1, err


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def test_a_cut_off_tarball_is_damaged_not_interrupted(tmp_path, capsys):
    b = tiny_pi4_bundle(tmp_path / "b")
    good = tmp_path / "b.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        for p in sorted(b.iterdir()):
            tar.add(p, arcname=p.name)
        tar.add(PASSWD, arcname="padding")  # enough bytes that a cut lands inside the stream
    assert verify(good, capsys)[0] == 2  # an unlisted file: damaged, as it should be
    data = good.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 30):
        bad = tmp_path / f"cut{cut}.tar.gz"
        bad.write_bytes(data[:cut])
        status, err = verify(bad, capsys)
        assert status == 2 and err.count("\n") == 1 and "interrupted" not in err, err
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(gzip.compress(b"\x00" * 100) + os.urandom(50))
    assert verify(garbage, capsys)[0] == 2


def _member(name: str, kind=tarfile.REGTYPE, linkname: str = "", data: bytes = b"x") -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind == tarfile.CHRTYPE:
        info.devmajor, info.devminor = 1, 3
    return info, data if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize("python_filter", [True, False], ids=["python-filter", "debian12-python"])
@pytest.mark.parametrize("member", ["../evil", "/abs/evil", "link-out", "link-up", "hardlink-out", "device"])
def test_unsafe_tar_members_are_one_sentence(tmp_path, capsys, monkeypatch, member, python_filter):
    if not python_filter:  # Debian 12's Python 3.11.2 has no tarfile.data_filter (3.11.4): rtforge's own check
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    members = {
        "../evil": _member("../evil"),
        "/abs/evil": _member("/abs/evil"),
        "link-out": _member("boot", tarfile.SYMTYPE, "/etc"),
        "link-up": _member("a/boot", tarfile.SYMTYPE, "../../etc"),
        "hardlink-out": _member("passwd", tarfile.LNKTYPE, "/etc/passwd"),
        "device": _member("null", tarfile.CHRTYPE),
    }
    path = _tar(tmp_path / "evil.tar.gz", [_member("manifest.json", data=b"{}"), members[member]])
    status, err = verify(path, capsys)
    assert status == 2 and err.count("\n") == 1, err
    assert "unsafe member" in err
    assert not Path("/abs").exists()
    assert not (tmp_path.parent / "evil").exists()


def test_qemu_options_never_come_from_a_manifest(tmp_path):
    """A manifest may name machines, not QEMU options: QEMU runs as root, and
    an option such as -virtfs would hand it this machine's files."""
    from rtforge.kernel.boottest import machines_of

    hostile = {
        "board": "pi1",
        "emulated": [
            {
                "machine": "raspi0",
                "cpu": "",
                "append": "console=ttyAMA0",
                "dtb": None,
                "qemu_args": ["-virtfs", "local,path=/,mount_tag=x"],
            }
        ],
    }
    [q] = machines_of(hostile)
    assert q["qemu_args"] == ["-icount", "shift=0,sleep=off"]  # the board file's, not the manifest's
    unknown = {"board": "no-such-board", "emulated": [{"machine": "virt", "qemu_args": ["-virtfs", "x"]}]}
    assert machines_of(unknown)[0]["qemu_args"] == []
