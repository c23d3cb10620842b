"""The boot bundle: what `rtforge kernel build` makes and `rtforge deploy` installs.

    manifest.json            what it is and the sha256 of every other file
    boot/<image>             the kernel, under a name that never overwrites the stock one
    boot/*.dtb               device trees
    boot/overlays/*.dtbo     overlays, with overlays/README (the firmware then
                             loads overlays from the os_prefix directory)
    lib/modules/<release>/   modules

A bundle is a directory or a tarball of one (.tar, .tar.gz, .tar.xz).

Manifest history (bump MANIFEST_VERSION and add a line when a field changes):
  1  2026-11  first version.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UserError

MANIFEST_VERSION = 1
REQUIRED = ("board", "arch", "machines", "models", "kernelrelease", "image", "uname_v_marker", "files")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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

    def module_dir(self) -> str:
        return f"lib/modules/{self.release}"

    def verify(self) -> None:
        """Every file present with its recorded sha256, nothing unlisted."""
        bad = []
        for rel, digest in self.files.items():
            p = self.root / rel
            if not p.is_file():
                bad.append(f"{rel} is missing")
            elif sha256_file(p) != digest:
                bad.append(f"{rel} does not match its sha256")
        extra = [str(p.relative_to(self.root)) for p in self.root.rglob("*")
                 if p.is_file() and p.name != "manifest.json" and str(p.relative_to(self.root)) not in self.files]
        bad += [f"{rel} is not in the manifest" for rel in extra]
        if bad:
            more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
            raise UserError(f"the bundle {self.root} is damaged: {'; '.join(bad[:3])}{more}; rebuild it")

    def close(self) -> None:
        if self._tmp:
            self._tmp.cleanup()


def open_bundle(path: Path) -> Bundle:
    """A bundle directory or tarball, checked for a readable manifest."""
    path = Path(path)
    tmp = None
    if path.is_file() and tarfile.is_tarfile(path):
        tmp = tempfile.TemporaryDirectory(prefix="rtforge-bundle-")
        with tarfile.open(path) as tar:
            tar.extractall(tmp.name, filter="data")  # no absolute paths, no escapes
        root = Path(tmp.name)
        inner = [p for p in root.iterdir()]
        if not (root / "manifest.json").exists() and len(inner) == 1 and (inner[0] / "manifest.json").exists():
            root = inner[0]
    elif path.is_dir():
        # a dist/<release>-<board>/ directory holds the bundle in bundle/
        root = path / "bundle" if not (path / "manifest.json").exists() and (path / "bundle").is_dir() else path
    else:
        raise UserError(f"{path} is not a bundle: give the directory or tarball that `rtforge kernel build` made")
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except FileNotFoundError:
        raise UserError(f"{path} has no manifest.json: it is not a bundle made by `rtforge kernel build`") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}/manifest.json:{e.lineno}: not valid JSON ({e.msg})") from None
    if manifest.get("manifest_version", 0) > MANIFEST_VERSION:
        raise UserError(f"{path} was made by a newer rtforge (manifest {manifest.get('manifest_version')}); upgrade rtforge")
    missing = [k for k in REQUIRED if k not in manifest]
    if missing:
        raise UserError(f"{path}/manifest.json lacks {', '.join(missing)}: rebuild the bundle")
    return Bundle(root, manifest, tmp)
