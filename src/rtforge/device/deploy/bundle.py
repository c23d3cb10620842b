"""The boot bundle: what `rtforge kernel build` makes and `rtforge deploy` installs.

    manifest.json            what it is and the sha256 of every other file
    boot/<image>             the kernel, under a name that never overwrites the stock one
    boot/*.dtb               device trees
    boot/overlays/*.dtbo     overlays, with overlays/README (the firmware then
                             loads overlays from the os_prefix directory)
    lib/modules/<release>/   modules

A bundle is a directory or a tarball of one (.tar, .tar.gz, .tar.xz).

A bundle may come from anywhere, and rtforge boots and installs it as root,
so its manifest is checked before anything uses it (manifest.py): an object
of the expected fields and types; every listed file a plain relative path
that, resolved with its symbolic links, stays inside the bundle and is a
regular file (never a link); the kernel image, the QEMU dtb and the release
names plain names.  `kernel/boottest.py` boots ``root/boot/<image>``, which
is therefore always a file of the bundle.  A damaged tarball or an unsafe
member is refused with one sentence.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import posixpath
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ...errors import UserError
from ...paths import resolved
from ..transport.transport import sha256_file
from .manifest import check_manifest, fits, parse_manifest, read_manifest_bytes


@dataclass
class Bundle:
    root: Path
    manifest: dict[str, Any]
    _tmp: tempfile.TemporaryDirectory | None = None
    manifest_bytes: bytes = b""   # manifest.json as read (once): what deploy installs as rtforge.json

    @property
    def manifest_sha256(self) -> str:
        return hashlib.sha256(self.manifest_bytes).hexdigest()

    @property
    def release(self) -> str:
        return self.manifest["kernelrelease"]

    @property
    def image(self) -> str:
        return self.manifest["image"]

    @property
    def board(self) -> str:
        return self.manifest["board"]

    @property
    def marker(self) -> str:
        """The word uname -v of its kernel holds (manifest.rt_marker)."""
        return self.manifest["uname_v_marker"]

    def fits(self, dt_model: str | None) -> bool:
        """A Pi with this /proc/device-tree/model is one it was built for."""
        return fits(dt_model, self.manifest.get("pis") or (), self.manifest["models"])

    @property
    def files(self) -> dict[str, str]:
        return self.manifest["files"]

    @property
    def size_kb(self) -> int:
        return sum((self.root / f).stat().st_size for f in self.files) // 1024 + 1

    def boot_files(self) -> list[str]:
        return sorted(f for f in self.files if f.startswith("boot/"))

    def member(self, rel: str) -> Path:
        """A file the manifest lists, resolved; never a path out of the bundle."""
        if rel not in self.files:
            raise UserError(f"the bundle {self.root} lists no {rel}: rebuild it")
        root = resolved(self.root, f"the bundle {self.root}")
        p = resolved(self.root / rel, f"{rel} in the bundle {self.root}")
        if not p.is_relative_to(root) or not p.is_file():
            raise UserError(f"the bundle {self.root} is damaged: {rel} leads out of it or is not a file; rebuild it")
        return p

    def module_dir(self) -> str:
        return f"lib/modules/{self.release}"

    def verify(self) -> None:
        """Every file present with its recorded sha256, nothing unlisted, and
        nothing but plain folders and regular files: the whole folder is
        uploaded and installed as root, so a link, a FIFO, a device node, a
        set-id or sticky file or anything others may write (mode o+w) is
        refused here (deploy normalises the other modes on the board)."""
        bad = []
        for rel, digest in self.files.items():
            p = self.root / rel
            if p.is_symlink():
                bad.append(f"{rel} is a symbolic link")
            elif not p.is_file():
                bad.append(f"{rel} is missing")
            elif sha256_file(p) != digest:
                bad.append(f"{rel} does not match its sha256")
        bad += self._entries()
        if bad:
            more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
            raise UserError(f"the bundle {self.root} is damaged: {'; '.join(bad[:3])}{more}; rebuild it")

    def _entries(self) -> list[str]:
        """What the folder holds beyond plain folders and listed regular files."""
        bad = []
        for top, dirs, names in os.walk(self.root):  # links to folders are in dirs, and not entered
            for name in sorted(dirs + names):
                path = os.path.join(top, name)
                rel = os.path.relpath(path, self.root)
                mode = os.lstat(path).st_mode
                if stat.S_ISDIR(mode):
                    if mode & stat.S_IWOTH:
                        bad.append(f"{rel}/ may be written by anyone (mode {mode & 0o7777:o})")
                elif stat.S_ISLNK(mode):
                    if rel not in self.files:
                        bad.append(f"{rel} is a symbolic link")
                elif not stat.S_ISREG(mode):
                    bad.append(f"{rel} is a FIFO, a device node or a socket")
                elif mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWOTH):
                    bad.append(f"{rel} has mode {mode & 0o7777:o} (set-id, sticky or writable by anyone)")
                elif rel not in self.files and rel != "manifest.json":
                    bad.append(f"{rel} is not in the manifest")
        return bad

    def close(self) -> None:
        if self._tmp:
            self._tmp.cleanup()


class _Unsafe(Exception):
    pass


def _check_members(tar: tarfile.TarFile) -> None:
    """Refuse what could land outside the folder: absolute names, "..",
    links leading out, devices and FIFOs.  Python's own "data" filter does
    the same, but Debian 12's Python (3.11.2) predates it (3.11.4)."""
    for m in tar.getmembers():
        parts = PurePosixPath(m.name).parts
        if m.name.startswith("/") or ".." in parts:
            raise _Unsafe(f"{m.name!r} leads outside the bundle")
        if m.isdev() or m.isfifo():
            raise _Unsafe(f"{m.name!r} is a device or FIFO")
        if m.issym() or m.islnk():
            base = PurePosixPath(m.name).parent if m.issym() else PurePosixPath()
            target = posixpath.normpath(str(base / m.linkname))
            if m.linkname.startswith("/") or target == ".." or target.startswith("../"):
                raise _Unsafe(f"{m.name!r} links to {m.linkname!r}, outside the bundle")


def _extract(path: Path) -> tempfile.TemporaryDirectory:
    """A tarball unpacked into a temporary folder; UserError if it is damaged or unsafe."""
    tmp = tempfile.TemporaryDirectory(prefix="rtforge-bundle-")
    try:
        with tarfile.open(path) as tar:
            _check_members(tar)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp.name, filter="data")  # and Python's own check, where it has one
            else:
                tar.extractall(tmp.name)
    except (_Unsafe, getattr(tarfile, "FilterError", _Unsafe)) as e:
        tmp.cleanup()
        raise UserError(f"{path} holds an unsafe member ({e}); rtforge does not unpack it: "
                        "use a bundle made by `rtforge kernel build`") from None
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as e:
        tmp.cleanup()
        raise UserError(f"{path} is damaged or cut off ({e or type(e).__name__}): copy the bundle again "
                        "or rebuild it") from None
    except OSError as e:
        tmp.cleanup()
        raise UserError(f"cannot unpack {path}: {e.strerror or e}; check the file and the free space in "
                        f"{tempfile.gettempdir()}") from None
    except BaseException:
        tmp.cleanup()
        raise
    return tmp


def _is_tarball(path: Path) -> bool:
    try:
        return path.is_file() and tarfile.is_tarfile(path)
    except (OSError, EOFError, zlib.error, lzma.LZMAError, tarfile.TarError):
        return True  # a damaged tarball: _extract says so


def open_bundle(path: Path) -> Bundle:
    """A bundle directory or tarball, checked for a manifest that keeps every path inside it."""
    path = Path(path)
    tmp = None
    if _is_tarball(path):
        tmp = _extract(path)
        root = Path(tmp.name)
        inner = [p for p in root.iterdir()]
        if (not (root / "manifest.json").exists() and len(inner) == 1 and not inner[0].is_symlink()
                and (inner[0] / "manifest.json").exists()):
            root = inner[0]
    elif path.is_dir():
        # a dist/<release>-<board>/ directory holds the bundle in bundle/
        root = path / "bundle" if not (path / "manifest.json").exists() and (path / "bundle").is_dir() else path
    else:
        raise UserError(f"{path} is not a bundle: give the directory or tarball that `rtforge kernel build` made")
    try:
        raw = read_manifest_bytes(path, root)
        manifest = parse_manifest(path, raw)
        check_manifest(path, root, manifest)
    except BaseException:
        if tmp:
            tmp.cleanup()
        raise
    return Bundle(root, manifest, tmp, raw)
