"""A target's boot partition as the bootcheck model reads it, over the
target's transport (so deploy checks exactly the files the firmware will see)."""

from __future__ import annotations

from ..transport.transport import CommandFailed
from .bootparse import boot_path

# Everything bootcheck reads of a boot partition (config.txt and its includes, cmdline.txt, an image's header)
BOOT_FILE_LIMIT = 4 << 20


class RemoteBootFiles:
    def __init__(self, target, boot_dir: str):
        self.target = target
        self.boot_dir = boot_dir
        self._cache: dict[tuple[str, int | None], bytes | None] = {}

    def _path(self, name: str) -> str | None:
        rel = boot_path(name)
        return None if rel is None else self.target.path(f"{self.boot_dir}/{rel}")

    def read(self, name: str, limit: int | None = None) -> bytes | None:
        key = (name, limit)
        if key not in self._cache:
            p = self._path(name)
            if p is None:
                self._cache[key] = None
            else:
                # only the first bytes of a kernel image are needed; a boot partition's text files are small,
                # and a FIFO or a device there is refused, not read
                try:
                    self._cache[key] = self.target.t.read_optional(p, limit=limit or BOOT_FILE_LIMIT, head=bool(limit),
                                                                   step="reading the boot partition")
                except CommandFailed:
                    self._cache[key] = None
        return self._cache[key]

    def exists(self, name: str) -> bool:
        p = self._path(name)
        return p is not None and self.target.t.run(["test", "-f", p]).returncode == 0
