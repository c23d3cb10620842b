"""The boot bundle: what `rtforge kernel build` makes and `rtforge deploy` installs.

    manifest.json            what it is and the sha256 of every other file
    boot/<image>             the kernel, under a name that never overwrites the stock one
    boot/*.dtb               device trees
    boot/overlays/*.dtbo     overlays, with overlays/README (the firmware then
                             loads overlays from the os_prefix directory)
    lib/modules/<release>/   modules

A bundle is a directory or a tarball of one (.tar, .tar.gz, .tar.xz).

A bundle may come from anywhere, and rtforge boots and installs it as root,
so its manifest is checked before anything uses it: an object of the
expected fields and types; every listed file a plain relative path that,
resolved with its symbolic links, stays inside the bundle and is a regular
file (never a link); the kernel image, the QEMU dtb and the release names
plain names.  `kernel/boottest.py` boots ``root/boot/<image>``, which is
therefore always a file of the bundle.  A damaged tarball or an unsafe
member is refused with one sentence.

Manifest history (bump MANIFEST_VERSION and add a line when a field changes):
  1  2026-11  first version.
"""

from __future__ import annotations

import json
import lzma
import os
import posixpath
import re
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ... import __version__
from ...errors import UserError
from ...paths import resolved
from ..transport.transport import sha256_file

MANIFEST_VERSION = 1
REQUIRED = ("board", "arch", "machines", "models", "kernelrelease", "image", "uname_v_marker", "files")
# A name used as one path component on the host and the board (image, dtb,
# release: lib/modules/<release>, the os_prefix folder).
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+~-]{0,127}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
MAX_MANIFEST_BYTES = 16 << 20


def write_manifest(root: Path, **fields: Any) -> dict[str, Any]:
    """Write root/manifest.json with the sha256 of every file under root."""
    files = {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != "manifest.json"}
    manifest = {"manifest_version": MANIFEST_VERSION, "rtforge_version": __version__, **fields, "files": files}
    missing = [k for k in REQUIRED if k not in manifest]
    if missing:
        raise ValueError(f"manifest lacks {missing}")
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


@dataclass
class Bundle:
    root: Path
    manifest: dict[str, Any]
    _tmp: tempfile.TemporaryDirectory | None = None

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
        """Every file present with its recorded sha256, nothing unlisted (links included)."""
        bad = []
        for rel, digest in self.files.items():
            p = self.root / rel
            if p.is_symlink():
                bad.append(f"{rel} is a symbolic link")
            elif not p.is_file():
                bad.append(f"{rel} is missing")
            elif sha256_file(p) != digest:
                bad.append(f"{rel} does not match its sha256")
        extra = [str(p.relative_to(self.root)) for p in self.root.rglob("*")
                 if (p.is_file() or p.is_symlink()) and p.relative_to(self.root) != Path("manifest.json")
                 and str(p.relative_to(self.root)) not in self.files]
        bad += [f"{rel} is not in the manifest" for rel in extra]
        if bad:
            more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
            raise UserError(f"the bundle {self.root} is damaged: {'; '.join(bad[:3])}{more}; rebuild it")

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


def _read_manifest(path: Path, root: Path) -> Any:
    where = root / "manifest.json"
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UserError(f"{path} has no manifest.json: it is not a bundle made by `rtforge kernel build`") from None
    except OSError as e:
        raise UserError(f"{path}/manifest.json cannot be read ({e.strerror}; a symbolic link is not followed): "
                        "rebuild the bundle") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path}/manifest.json is not a regular file: rebuild the bundle")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise UserError(f"{path}/manifest.json is over {MAX_MANIFEST_BYTES >> 20} MB, not a manifest: "
                        "rebuild the bundle")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{path}/manifest.json is not UTF-8 text (byte {e.start}): rebuild the bundle") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}/manifest.json:{e.lineno}: not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:
        raise UserError(f"{path}/manifest.json is not a manifest ({type(e).__name__}): rebuild the bundle") from None


def _safe_rel(rel: Any) -> bool:
    """A plain relative path inside the bundle: no '..', no '.', no empty part."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel:
        return False
    parts = PurePosixPath(rel).parts
    return not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts) and "/".join(parts) == rel


def check_manifest(path: Path, root: Path, m: Any) -> None:
    """UserError unless m is a manifest whose every path stays inside root."""
    def bad(what: str) -> UserError:
        return UserError(f"{path}/manifest.json {what}: rebuild the bundle with `rtforge kernel build`")
    if not isinstance(m, dict):
        raise bad(f"holds {type(m).__name__}, not a manifest object")
    version = m.get("manifest_version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise bad(f"has manifest_version {version!r}, not a number")
    if version > MANIFEST_VERSION:
        raise UserError(f"{path} was made by a newer rtforge (manifest {version}); upgrade rtforge")
    missing = [k for k in REQUIRED if k not in m]
    if missing:
        raise UserError(f"{path}/manifest.json lacks {', '.join(missing)}: rebuild the bundle")
    for key in ("board", "arch", "uname_v_marker"):
        if not isinstance(m[key], str):
            raise bad(f"has a {key} that is not a string")
    for key in ("machines", "models", "pis"):
        if key in m and (not isinstance(m[key], list) or not all(isinstance(x, str) for x in m[key])):
            raise bad(f"has {key} that are not a list of strings")
    for key in ("kernelrelease", "image"):
        if not isinstance(m[key], str) or not NAME_RE.fullmatch(m[key]):
            raise bad(f"has a {key} ({str(m[key])[:60]!r}) that is not a plain name")
    files = m["files"]
    if not isinstance(files, dict) or not all(isinstance(v, str) and SHA256_RE.fullmatch(v) for v in files.values()):
        raise bad("has 'files' that do not map paths to sha256 digests")
    base = resolved(root, f"the bundle {root}")
    for rel in files:
        if not _safe_rel(rel) or rel == "manifest.json":
            raise bad(f"lists {str(rel)[:80]!r}, which is not a plain path inside the bundle")
        target = root / rel
        # every part of the path a real folder or file: a link could lead anywhere
        if any((root / PurePosixPath(*PurePosixPath(rel).parts[:i])).is_symlink()
               for i in range(1, len(PurePosixPath(rel).parts) + 1)):
            raise bad(f"lists {rel}, which is (or lies under) a symbolic link")
        real = resolved(target, f"{rel} in the bundle {root}")
        if real != base and base not in real.parents:
            raise bad(f"lists {rel}, which leads outside the bundle")
    if f"boot/{m['image']}" not in files:
        raise bad(f"names the kernel image {m['image']} but does not list boot/{m['image']}")
    machines = [("qemu", m["qemu"])] if m.get("qemu") is not None else []
    if m.get("emulated") is not None:
        if not isinstance(m["emulated"], list):
            raise bad("has an 'emulated' entry that is not a list")
        machines += [("emulated", q) for q in m["emulated"]]
    for key, q in machines:
        if not isinstance(q, dict) or not all(isinstance(q.get(k), (str, type(None))) for k in ("machine", "cpu",
                                                                                             "append", "dtb")):
            raise bad(f"has a '{key}' entry that is not an object of strings")
        if not isinstance(q.get("machine"), str) or not NAME_RE.fullmatch(q["machine"]):
            raise bad(f"has a '{key}' entry without a plain machine name")
        dtb = q.get("dtb")
        if dtb is not None and not NAME_RE.fullmatch(dtb):
            raise bad(f"names the QEMU dtb {dtb[:60]!r}, which is not a plain file name")
        if dtb is not None and os.path.lexists(root / "boot" / dtb) and f"boot/{dtb}" not in files:
            raise bad(f"names the QEMU dtb {dtb}, which is in boot/ but not listed (and so not checked)")


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
        manifest = _read_manifest(path, root)
        check_manifest(path, root, manifest)
    except BaseException:
        if tmp:
            tmp.cleanup()
        raise
    return Bundle(root, manifest, tmp)
