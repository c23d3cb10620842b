"""A run's raw files, read without trusting them.

A run folder may come from anywhere: a killed run of this machine, a store
copied from a colleague, a backup, a board that was not what it claimed.
Every file rtforge reads from one is opened here: component by component
below the run's folder without following a symbolic link (so raw/ cannot
point elsewhere), as a regular file (a FIFO would block forever, /dev/zero
never end), and never more than its bound.  What breaks these rules is a
RawFileError with one sentence saying which file and why; the run is then
kept from what could be read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
# What the engines write, with room to spare: the probe's per-second series
# is ~250 bytes a second on 4 CPUs (a 100-day run ~2 GB); its final JSON
# holds the histograms and metadata (a few MB); the runner's own files are lines.
LIMITS = {"series.jsonl": 4 * GiB, "telemetry.jsonl": 4 * GiB, "probe.json": 256 * MiB, "spikes.csv": 1 * GiB,
          "cyclictest.json": 256 * MiB, "cyclictest.out": 256 * MiB, "steps.log": 64 * MiB}
SMALL = 1 * MiB          # the runner's bookkeeping: state, pid files, events, times
DEFAULT = 64 * MiB       # any other engine output (rtla's analyses, a benchmark's logs)


class RawFileError(ValueError):
    """A raw file that is not a bounded regular file inside its run folder."""


def limit_for(rel: str) -> int:
    name = rel.rsplit("/", 1)[-1]
    if name in LIMITS:
        return LIMITS[name]
    return SMALL if rel.startswith(("raw/runner/", "runner/")) else DEFAULT


def _open(folder: Path, rel: str) -> int | None:
    """An fd on folder/rel, each component opened without following links; None when missing."""
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise RawFileError(f"{rel} is not a name inside a run folder")
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        why = "a symbolic link or a file" if e.errno in (errno.ELOOP, errno.ENOTDIR) else e.strerror
        raise RawFileError(f"{folder} is not a run folder ({why})") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                nfd = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                where = "/".join(parts[: i + 1])
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise RawFileError(f"{where} in {folder.name} is a symbolic link or not a folder: rtforge reads "
                                       "only the files inside a run's folder") from None
                raise RawFileError(f"{where} in {folder.name} cannot be opened: {e.strerror}") from None
            os.close(fd)
            fd = nfd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RawFileError(f"{rel} in {folder.name} is not a regular file (a FIFO, a device or a folder)")
        if st.st_size > limit_for(rel):
            raise RawFileError(f"{rel} in {folder.name} is {st.st_size / MiB:,.0f} MiB, more than an engine writes "
                               f"(at most {limit_for(rel) / MiB:,.0f} MiB)")
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)


def read_bytes(folder: Path, rel: str) -> bytes | None:
    """folder/rel's bytes (within its bound); None when it does not exist."""
    fd = _open(Path(folder), rel)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit_for(rel) + 1)
    if len(data) > limit_for(rel):  # it grew while being read
        raise RawFileError(f"{rel} in {Path(folder).name} grew beyond {limit_for(rel) / MiB:,.0f} MiB while read")
    return data


def read_text(folder: Path, rel: str, default: str | None = "") -> str | None:
    """folder/rel as text (undecodable bytes replaced); default when missing."""
    data = read_bytes(folder, rel)
    return default if data is None else data.decode("utf-8", "replace")


def lines(folder: Path, rel: str) -> Iterator[str]:
    """folder/rel line by line, without holding the file in memory twice; nothing when missing."""
    fd = _open(Path(folder), rel)
    if fd is None:
        return
    budget = limit_for(rel)
    with os.fdopen(fd, "rb") as f:
        for raw in f:
            budget -= len(raw)
            if budget < 0:
                raise RawFileError(f"{rel} in {Path(folder).name} grew beyond its bound while read")
            yield raw.decode("utf-8", "replace")


def exists(folder: Path, rel: str) -> bool:
    """Whether folder/rel is there as a regular file (links and FIFOs are not)."""
    try:
        fd = _open(Path(folder), rel)
    except RawFileError:
        return False
    if fd is None:
        return False
    os.close(fd)
    return True


def names(folder: Path, rel_dir: str) -> list[str]:
    """The entries of a folder below the run folder (opened without following links)."""
    path = Path(folder) / rel_dir
    if path.is_symlink() or not path.is_dir() or any(Path(folder, *rel_dir.split("/")[:i + 1]).is_symlink()
                                                     for i in range(len(rel_dir.split("/")))):
        return []
    return sorted(os.listdir(path))
