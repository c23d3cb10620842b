"""Where rtforge keeps things (per the XDG base directory spec), and how it
writes them.

rtforge runs as root, so where it writes is checked, not assumed: it writes
only into its store, its cache, the build and dist folders and the output
paths the user names, and only through the helpers here (write_atomic,
create_new, open_existing: tests/unit/test_write_paths.py fails on any
other write), which never write through a link or wait on a FIFO.  A named output path must be a regular file or not
exist yet -- never a device (``-o /dev/null`` once replaced /dev/null with a
file), a FIFO, a folder or a symbolic link (the rename would replace the
link).  Every write goes to a temporary file in the same folder, is synced
and then renamed over the target, so a full disk, a file size limit or a
read-only file system leaves the old file (or nothing) and no temporary file.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from .errors import UserError


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var)
    # The spec says relative paths are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def data_dir() -> Path:
    """Run store root unless --results-dir / RTFORGE_RESULTS_DIR says otherwise."""
    override = os.environ.get("RTFORGE_RESULTS_DIR")
    return Path(override) if override else _xdg("XDG_DATA_HOME", ".local/share") / "rtforge"


def cache_dir() -> Path:
    """Built probes, kernel sources and ccache: safe to delete."""
    override = os.environ.get("RTFORGE_CACHE_DIR")
    return Path(override) if override else _xdg("XDG_CACHE_HOME", ".cache") / "rtforge"


def download_dir() -> Path:
    """Files rtforge downloads (Debian packages, release tarballs, RT patches):
    they never change once published, so a CI machine may keep this folder
    between clean runs (RTFORGE_DOWNLOAD_CACHE)."""
    override = os.environ.get("RTFORGE_DOWNLOAD_CACHE")
    return Path(override) if override else cache_dir() / "downloads"


# errno -> what to do about it, for one-sentence errors
_ADVICE = {
    errno.ENOSPC: "the disk is full: free some space or write elsewhere",
    errno.EDQUOT: "the disk quota is used up: free some space or write elsewhere",
    errno.EFBIG: "the file would exceed the file size limit (ulimit -f): raise the limit or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "permission denied: check the folder's permissions or write elsewhere",
    errno.EPERM: "the operation is not permitted there: write elsewhere",
    errno.ENOENT: "the folder does not exist or does not take new files: write elsewhere",
    errno.ENOTDIR: "a part of the path is not a folder: check the path",
    errno.EISDIR: "it is a folder: name a file",
    errno.ENAMETOOLONG: "the name is too long: choose a shorter one",
    errno.ELOOP: "the path has a loop of symbolic links: check the path",
    errno.EIO: "the disk reported an I/O error: check the disk",
}


def os_error_sentence(path: Path | str, e: OSError, doing: str = "write") -> str:
    """'cannot write PATH: <what happened>; <what to do>' for an OSError."""
    advice = _ADVICE.get(e.errno or 0)
    what = advice or f"{e.strerror or e}: check the path and the disk"
    return f"cannot {doing} {path}: {what}"


def check_output(path: Path | str) -> Path:
    """A path the user named for rtforge to write (a report, a plot): it must be
    a regular file or not exist, in an existing folder; UserError otherwise."""
    path = Path(path)
    if not path.name or path.name in (".", ".."):
        raise UserError(f"cannot write '{path}': name a file, e.g. {path / 'report.html'}")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UserError(os_error_sentence(path, e)) from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise UserError(f"cannot write {path}: it is a symbolic link, which rtforge does not replace or follow; "
                            "name the file it points to, or a new file")
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"cannot write {path}: it is a folder; name a file in it, e.g. {path / 'report.html'}")
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"cannot write {path}: it is a device, FIFO or socket, not a regular file; "
                            "name a regular file (or a new one)")
    parent = path.parent
    if not parent.is_dir():
        raise UserError(f"cannot write {path}: {parent} is not a directory; create that folder first")
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path | str, data: bytes | str, *, private: bool = False, fixed_tmp: bool = False) -> None:
    """Write data to path through a synced temporary file in the same folder
    and a rename; on any error (UserError for an OSError) nothing is left
    behind and an existing file is untouched.  The caller checks the path.

    fixed_tmp: the temporary file is always .<name>.tmp, so one left by a
    writer that was SIGKILLed is taken over by the next write (the run
    store, whose files one process at a time writes): whatever has that
    name -- a leftover, or a link or a FIFO someone put there -- is removed
    and a new file made (O_EXCL), never written through or waited on."""
    path = Path(path)
    blob = data.encode() if isinstance(data, str) else data
    tmp: str | None = None
    try:
        if fixed_tmp:
            tmp = str(path.with_name(f".{path.name}.tmp"))
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        else:  # a short prefix: a name near NAME_MAX must not make the temp name too long
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:32]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp's 0600 is for secrets, not reports
        os.chmod(tmp, (0o600 if private else 0o666) & ~_umask())
        os.replace(tmp, path)
        tmp = None
        sync_dir(path.parent)
    except OSError as e:
        raise UserError(os_error_sentence(path, e)) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass  # it was never made, or the folder went away


def create_new(path: Path | str, mode: int = 0o644) -> int:
    """A write-only fd on a new file at path: what stands there (an old file,
    or a link or a FIFO someone put) is removed first, and the file made with
    O_EXCL|O_NOFOLLOW, so it is never written through a link nor waited on.
    OSError as os.open raises it."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def open_existing(path: Path | str, flags: int, mode: int = 0o644) -> int:
    """An fd on a regular file at path, opened (and made, with O_CREAT in
    flags) without following a link and without waiting on a FIFO; OSError
    (EINVAL for a FIFO, a device or a folder) otherwise.  For the files kept
    open or appended to: a lock, a log of windows."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    os.set_blocking(fd, True)
    return fd


def sync_dir(folder: Path) -> None:
    """Make the rename durable; some file systems cannot sync a folder."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_output(path: Path | str, data: bytes | str) -> Path:
    """An output file the user named: checked (check_output), then written atomically."""
    path = check_output(path)
    write_atomic(path, data)
    return path


def resolved(path: Path | str, shown: str) -> Path:
    """Path.resolve() of a path the user named (`shown` names it in the
    message, "--sysroot DIR").  A loop of symbolic links on the way (`ln -s a
    b; ln -s b a`) makes resolve() raise RuntimeError up to Python 3.12 (3.13
    returns the path as it is, for the caller's next check to refuse): the
    user's to fix, so one sentence, no traceback."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise UserError(f"{shown} leads into a loop of symbolic links: name the file or folder itself, or fix the "
                        "link (ls -l shows where each one points)") from None
    except OSError as e:
        raise UserError(os_error_sentence(path, e, "read")) from None


def inside(root: Path, rel: str | Path) -> Path:
    """root/rel, resolved with symbolic links; UserError when it leaves root.
    For paths read from files rtforge did not write itself (manifests, results)."""
    base = resolved(root, str(root))
    target = resolved(base / rel, str(rel))
    if target != base and base not in target.parents:
        raise UserError(f"'{rel}' leads outside {root}; refusing to use it")
    return target


# ---------------------------------------------------------------- bounded reads of files rtforge did not write
# (kept together at the end of the module: the trees, sysroots and bundles a user names are read through it)

def read_regular_bounded(path: Path | str, limit: int, shown: str) -> bytes:
    """The bytes of path, which must be a regular file of at most limit bytes.

    For files of trees, bundles and copies of boards that rtforge did not
    write (architecture rule 12): opened without following a final symbolic
    link (a Makefile linked to /dev/zero would never end) and without
    blocking (a FIFO would wait for a writer forever), then checked to be a
    regular file.  A missing file raises FileNotFoundError, for the caller to
    say what that means; anything else is a UserError naming `shown`."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"{shown} is a symbolic link, which rtforge does not follow there: "
                            "put the file itself in its place") from None
        raise UserError(os_error_sentence(shown, e, "read")) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{shown} is not a regular file (a FIFO, a device, a socket or a folder): "
                            "rtforge reads only regular files there")
        raise UserError(f"{shown} is {st.st_size:,} bytes, more than the {limit:,} rtforge reads there: "
                        "check that it is the file you meant")
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise UserError(f"{shown} grew past {limit:,} bytes while it was read: check that it is the file you meant")
    return data
