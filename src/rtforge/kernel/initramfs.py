"""A minimal initramfs, written directly as a "newc" cpio archive.

Writing the format here (it is a fixed header per entry, see the kernel's
Documentation/driver-api/early-userspace/buffer-format.rst) means no root
is needed to create /dev/console and nothing depends on the host's cpio.
"""

from __future__ import annotations

import stat
from pathlib import Path


def _entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0), ino: int = 0) -> bytes:
    name_b = name.encode() + b"\0"
    fields = [0x070701, ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name_b), 0]
    header = b"070701" + b"".join(f"{f:08X}".encode() for f in fields[1:])
    out = header + name_b
    out += b"\0" * (-len(out) % 4)
    out += data + b"\0" * (-len(data) % 4)
    return out


def build(files: dict[str, Path], dest: Path) -> Path:
    """files: path in the archive -> local file (executables keep mode 0755)."""
    parts = []
    ino = 1
    for d in ("dev", "proc", "sys", "tmp"):
        parts.append(_entry(d, stat.S_IFDIR | 0o755, ino=ino))
        ino += 1
    parts.append(_entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1), ino=ino))
    made = {"dev", "proc", "sys", "tmp"}
    for name, src in files.items():
        rel = name.lstrip("/")
        parents = [str(p) for p in reversed(Path(rel).parents) if str(p) != "."]
        for d in parents:                      # a file's folders come before it (modules/x.ko)
            if d not in made:
                ino += 1
                parts.append(_entry(d, stat.S_IFDIR | 0o755, ino=ino))
                made.add(d)
        ino += 1
        parts.append(_entry(rel, stat.S_IFREG | 0o755, Path(src).read_bytes(), ino=ino))
    parts.append(_entry("TRAILER!!!", 0))
    data = b"".join(parts)
    dest.write_bytes(data + b"\0" * (-len(data) % 512))
    return dest
