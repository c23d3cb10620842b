"""A run folder on disk, read without trusting it.

Folders in the store may have been edited, truncated, replaced by links or
copied in by hand.  Nothing here follows a symbolic link, reads anything but
a regular file, or reads more than a result can hold; what is wrong comes
back as ``Damaged`` with the reason, for the store to list.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
from pathlib import Path

from ...errors import UserError
from ..model import RunResult
from ..schema import Damaged

# A result.json larger than this is not one rtforge wrote (a day-long probe
# run with its per-second series is a few MB).
MAX_RESULT_BYTES = 512 << 20
# The largest file `rtforge import` takes: cyclictest -h 1000000 with 128
# threads prints ~0.9 GB; nothing real is larger.
MAX_IMPORT_BYTES = 1 << 30
# A folder without result.json younger than this is a run being written.
SETTLING_S = 60

def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_regular(path: Path, limit: int) -> bytes:
    """A regular file's bytes, never through a symbolic link, never more than
    limit (Damaged otherwise): a FIFO or a link out of the store is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise Damaged(f"it has no {path.name}") from None
    except OSError as e:
        raise Damaged(f"{path.name} is a symbolic link" if e.errno == errno.ELOOP else
                      f"{path.name}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Damaged(f"{path.name} is not a regular file")
        raise Damaged(f"{path.name} is {st.st_size >> 20} MB, far more than it should hold")
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read(limit + 1)
        except OSError as e:
            raise Damaged(f"{path.name} cannot be read: {e.strerror}") from None


def read_result(folder: Path) -> RunResult:
    """folder/result.json as a RunResult; Damaged (why) when it is not one."""
    data = read_regular(folder / "result.json", MAX_RESULT_BYTES)
    try:
        doc = json.loads(data, parse_constant=_reject_constant)
    except RecursionError:
        raise Damaged("result.json is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, digits beyond Python's limit
        where = f" (line {e.lineno})" if isinstance(e, json.JSONDecodeError) else ""
        raise Damaged(f"result.json is not valid JSON{where}: {e}") from None
    try:
        result = RunResult.from_dict(doc)
    except (KeyError, TypeError, OverflowError) as e:
        raise Damaged(f"result.json has an unexpected shape ({type(e).__name__}: {e})") from None
    except UserError as e:  # written by a newer rtforge
        raise Damaged(str(e)) from None
    if result.run_id != folder.name:
        raise Damaged(f"its run_id '{result.run_id}' is not its folder's name")
    return result


def file_key(folder: Path | os.DirEntry) -> str | None:
    """What identifies a folder's result.json version: inode, size, mtime.
    None for a folder still being written (no result.json, just made).  A
    DirEntry from a scan of runs/ knows whether it is a folder without a stat."""
    try:
        is_dir = folder.is_dir(follow_symlinks=False) if isinstance(folder, os.DirEntry) else \
            stat.S_ISDIR(os.lstat(folder).st_mode)
        if not is_dir:
            fst = os.lstat(folder)
            return f"not a folder:{fst.st_mode}:{fst.st_mtime_ns}"
    except OSError:
        return None
    try:
        st = os.lstat(os.path.join(folder, "result.json"))
    except FileNotFoundError:
        try:
            fst = os.lstat(folder)
            with os.scandir(os.fspath(folder)) as it:
                empty = next(it, None) is None
        except OSError:
            return None
        if time.time() - fst.st_mtime < SETTLING_S or empty:
            return None
        return f"missing:{fst.st_mtime_ns}"
    except OSError as e:
        return f"error:{e.errno}"
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_mode}"


def damaged_source(folder: Path) -> str | None:
    """The sha256 of the file a damaged import was made from, so that it is
    not imported twice: from what is left of result.json, else from its one raw file."""
    if folder.is_symlink() or not folder.is_dir():
        return None
    try:
        doc = json.loads(read_regular(folder / "result.json", MAX_RESULT_BYTES))
        sha = doc.get("source", {}).get("sha256") if isinstance(doc, dict) else None
        if isinstance(sha, str):
            return sha
    except (Damaged, ValueError, RecursionError, AttributeError):
        pass
    raw = folder / "raw"
    try:
        if raw.is_symlink() or not raw.is_dir():
            return None
        files = list(raw.iterdir())
        if len(files) != 1:
            return None
        fd = os.open(files[0], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        with os.fdopen(fd, "rb") as f:
            h = hashlib.sha256()
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
            return h.hexdigest()
    except OSError:
        return None
