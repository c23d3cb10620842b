"""Downloads, hashing, extraction and the cache layout that sources.py and
rtpatch.py share.  Nothing here prints: long operations report through an
optional progress callback ``progress(what, done, total)`` (done/total in
bytes or items, None when unknown).

Cache layout, under rtforge.paths.cache_dir()/kernel/ (safe to delete):

    (paths.download_dir()/http/<url-hash>-<name>: files fetched over http(s),
     reused by URL; debian/: Debian packages, see debian.py)
    apt/                          rtforge's private apt lists (debian.py)
    src/<key>/                    pristine source trees, never written after
    src/<key>.json                  they are renamed into place; the json
                                    (written first) records the source id
    rt/<key>/                     RT-patched copies (see rtpatch.py)
    rtpatches/<sha16>/            RT patches, decompressed / unpacked
    locks/<key>.lock              flock()ed while a tree is being made
    git-refs.json                 last commit seen per git URL@ref (offline reuse)

A tree is made in a hidden temp directory next to its final place and
renamed into place only when complete, so an interrupted run never leaves a
half-made tree that a later run would trust.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from .. import paths
from ..errors import UserError

Progress = Callable[[str, int | None, int | None], None] | None

CHUNK = 1 << 20
HTTP_TIMEOUT_S = 60
USER_AGENT = "rtforge/0.1 (kernel sources and RT patches)"


def report(progress: Progress, what: str, done: int | None = None, total: int | None = None) -> None:
    if progress is not None:
        progress(what, done, total)


def kernel_cache() -> Path:
    root = paths.cache_dir() / "kernel"
    root.mkdir(parents=True, exist_ok=True)
    return root


def safe_name(text: str) -> str:
    """A string usable as one path component (Debian versions have '~' and ':')."""
    return "".join(c if c.isalnum() or c in ".+-_" else "_" for c in text)


def sha256_file(path: Path, progress: Progress = None, what: str = "") -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            report(progress, what or f"hashing {path.name}", done, total)
    return h.hexdigest()


def is_url(text: str) -> bool:
    return urllib.parse.urlsplit(text).scheme in ("http", "https")


def url_basename(url: str) -> str:
    return Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name


class Unreachable(UserError):
    """The server could not be reached at all (as opposed to answering no)."""


def _http_error(url: str, e: Exception) -> UserError:
    if isinstance(e, urllib.error.HTTPError):
        return UserError(f"{url} answered HTTP {e.code} {e.reason}: check the URL")
    reason = getattr(e, "reason", e)
    return Unreachable(f"cannot download {url}: {reason} (no network? a local file works too)")


def fetch_text(url: str) -> str:
    """A small document (a directory index); UserError on any failure."""
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r:
            return r.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError) as e:
        raise _http_error(url, e) from None


def download(url: str, progress: Progress = None) -> Path:
    """Fetch url into downloads/ (reused when already there: the URLs rtforge
    fetches, release tarballs and RT patches, never change once published)."""
    name = safe_name(url_basename(url)) or "download"
    dest = paths.download_dir() / "http" / f"{hashlib.sha256(url.encode()).hexdigest()[:12]}-{name}"
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r, open(part, "wb") as out:
            total = r.length
            done = 0
            while chunk := r.read(CHUNK):
                out.write(chunk)
                done += len(chunk)
                report(progress, f"downloading {name}", done, total)
            if total is not None and done != total:
                raise UserError(f"download of {url} ended after {done} of {total} bytes: try again")
        os.replace(part, dest)
    except (urllib.error.URLError, OSError) as e:
        raise _http_error(url, e) from None
    finally:
        part.unlink(missing_ok=True)
    return dest


@contextlib.contextmanager
def locked(key: str, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Serialise work on one cache entry between rtforge processes;
    waiting() is called once if another process holds it, before waiting."""
    lockdir = kernel_cache() / "locks"
    lockdir.mkdir(parents=True, exist_ok=True)
    with open(lockdir / f"{key}.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                waiting()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Staging:
    """Where a cache entry is being made: ``dir`` is fresh and empty; set
    ``root`` to a directory inside it if that, not ``dir``, is the result."""

    def __init__(self, dir: Path):
        self.dir = dir
        self.root = dir


@contextlib.contextmanager
def building(final: Path) -> Iterator[Staging]:
    """A fresh temp directory beside final; its root is renamed to final if
    the body succeeds, and everything is removed otherwise.  Call under
    locked(): leftovers of killed runs for the same entry are removed first."""
    final.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".tmp-{final.name}-"
    for stale in final.parent.glob(prefix + "*"):
        shutil.rmtree(stale, ignore_errors=True)
    stage = Staging(final.parent / f"{prefix}{os.getpid()}")
    stage.dir.mkdir(mode=0o700)  # nobody else reaches what is made here before it is checked
    try:
        yield stage
        if final.exists():      # a tree without its record is incomplete by definition (we hold the lock)
            shutil.rmtree(final)
        if stage.root == stage.dir:
            os.chmod(stage.dir, 0o755)
        os.rename(stage.root, final)
    finally:
        if stage.dir.exists():
            shutil.rmtree(stage.dir, ignore_errors=True)


def write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


_MAGIC = [(b"\xfd7zXZ\x00", "--xz"), (b"\x1f\x8b", "--gzip"), (b"BZh", "--bzip2"), (b"\x28\xb5\x2f\xfd", "--zstd")]


def tar_compression(path: Path) -> str | None:
    """tar's decompression option from the file's magic bytes (names lie)."""
    with open(path, "rb") as f:
        head = f.read(512)
    for magic, option in _MAGIC:
        if head.startswith(magic):
            return option
    if head[257:262] == b"ustar":
        return None
    raise UserError(f"{path} is not a tar archive (.tar, .tar.gz, .tar.xz, .tar.bz2, .tar.zst)")


def extract_tar(archive: Path, into: Path, progress: Progress = None, what: str = "") -> None:
    """Unpack with GNU tar (fast, and it refuses members that escape the
    directory), feeding it the archive ourselves to report progress in bytes.
    --no-same-permissions: the umask's modes, never a set-id bit (root would
    otherwise keep them); what tar still makes that no source tree holds is
    refused by check_entries before the tree is renamed into the cache."""
    option = tar_compression(archive)
    argv = ["tar", "-x", "-f", "-", "-C", str(into), "--no-same-owner", "--no-same-permissions"] + \
        ([option] if option else [])
    total = archive.stat().st_size
    what = what or f"extracting {archive.name}"
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None   # both PIPE
    try:
        done = 0
        with open(archive, "rb") as f:
            while chunk := f.read(CHUNK):
                try:
                    proc.stdin.write(chunk)
                except BrokenPipeError:
                    break
                done += len(chunk)
                report(progress, what, done, total)
        proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace").strip()
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if rc != 0:
        last = err.splitlines()[-1] if err else f"tar exited with {rc}"
        raise UserError(f"cannot extract {archive}: {last}")


def check_entries(root: Path, what: str) -> None:
    """UserError unless every entry below root is a folder, a regular file
    without a set-id bit, or a link that stays inside root (a kernel tree has
    links of its own: scripts/dtc/include-prefixes/).  A tarball or a
    repository may come from anywhere: a link out of the tree would make the
    cache's "source tree" a host folder (the files built would be the host's,
    the recorded id the tarball's), and devices, FIFOs and setuid files have
    no place in a source tree."""
    base = os.path.realpath(root)
    folders = [str(root)]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for e in entries:
                mode = e.stat(follow_symlinks=False).st_mode
                rel = os.path.relpath(e.path, root)
                if stat.S_ISLNK(mode):
                    real = os.path.realpath(e.path)
                    if real != base and not real.startswith(base + os.sep):
                        raise UserError(f"{what} holds {rel!r}, a link to {os.readlink(e.path)!r} outside the tree: "
                                        "rtforge puts no link out of a source tree into its cache; use the tree "
                                        "itself")
                elif stat.S_ISDIR(mode):
                    folders.append(e.path)
                elif not stat.S_ISREG(mode):
                    raise UserError(f"{what} holds {rel!r}, a device, FIFO or socket, which no kernel source has: "
                                    "rtforge does not put it into its cache")
                elif mode & (stat.S_ISUID | stat.S_ISGID):
                    raise UserError(f"{what} holds {rel!r}, a setuid or setgid file, which no kernel source has: "
                                    "rtforge does not put it into its cache")


def run(argv: list[str], *, cwd: Path | None = None, what: str = "", env: dict | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run a tool; a missing tool or a failure is the user's to fix (UserError
    with the tool's last line of output)."""
    if shutil.which(argv[0]) is None:
        pkg = {"git": "git", "patch": "patch", "tar": "tar", "xz": "xz-utils", "apt-get": "apt"}.get(argv[0], argv[0])
        raise UserError(f"{argv[0]} is not installed: apt-get install {pkg}")
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        lines = (p.stderr.strip() or p.stdout.strip()).splitlines()
        raise UserError(f"{what or ' '.join(argv[:2])} failed: {lines[-1] if lines else f'exit status {p.returncode}'}")
    return p
