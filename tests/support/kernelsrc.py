"""Shared parts of the kernel source / RT patch tests: Debian's real kernel
trees (extracted once into the gitignored cache), a loopback HTTP server
that lists directories the way kernel.org's nginx does, small real trees cut
from the 6.12 tree for tar/git/dir sources, and cleanup of the cache entries
a test session made (entries carry a per-run nonce so that every run really
extracts, clones and patches instead of finding last run's result)."""

from __future__ import annotations

import contextlib
import html
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import uuid
from email.utils import formatdate
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path

from rtforge import paths
from rtforge.kernel import fetch

NONCE = uuid.uuid4().hex[:10]

# Real files of the 6.12 tree that tar/git/dir tests carry: enough for the
# version, the flavour and RT detection, small enough to pack in a moment.
SUBSET = ["Makefile", "Kconfig", "kernel/Kconfig.preempt", "arch/Kconfig", "arch/arm64/Kconfig",
          "arch/arm64/configs/defconfig", "arch/arm/Kconfig", "arch/x86/Kconfig"]


@contextlib.contextmanager
def cache_entries_removed_after():
    """Cache entries this process made while a test module ran go after it;
    the Debian trees stay, that is the point of the cache.  What was made is
    watched at rtforge's own makers (fetch.building, download, write_json),
    not read from the folders: beside another pytest worker the folders also
    hold its entries, made meanwhile and in use (a set difference removed
    one worker's unpacked RT patch under the other's `patch`)."""
    import pytest

    made: set[Path] = set()
    real_building, real_download, real_write_json = fetch.building, fetch.download, fetch.write_json

    def building(final: Path):
        made.add(Path(final))            # called only for an entry not there yet (under its lock)
        return real_building(final)

    def download(url: str, progress=None) -> Path:
        dest = real_download(url, progress)
        made.add(dest)                   # a download already cached was made by some earlier run: kept below
        return dest

    def write_json(path: Path, doc: dict) -> None:
        existed = Path(path).exists()
        real_write_json(path, doc)
        if not existed:
            made.add(Path(path))

    before = {p for d in ("src", "rt", "rtpatches") for p in (fetch.kernel_cache() / d).glob("*")} \
        | set((paths.download_dir() / "http").glob("*"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fetch, "building", building)
        mp.setattr(fetch, "download", download)
        mp.setattr(fetch, "write_json", write_json)
        yield
    for p in made - before:
        if not _shared(p):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def _shared(entry: Path) -> bool:
    """A source tree every test may use, whoever made it: Debian's, and the
    checkout of the raspberrypi/linux stand-in (tests/support/rpirepo.py, kept
    itself; its tag's commit names the tree).  Removed after a module, it went
    from under another worker's `--match` mid-configure ("can't open file
    net/Kconfig.debug")."""
    if entry.parent.name != "src":
        return False
    key = entry.name.removesuffix(".json")
    if key.startswith("debian-"):
        return True
    try:
        origin = str(json.loads((entry.parent / f"{key}.json").read_text()).get("origin", ""))
    except (OSError, ValueError):
        return False
    return "/test-repos/rpi-layout-" in origin


# ---------------------------------------------------------------- HTTP

class _KernelOrgHandler(SimpleHTTPRequestHandler):
    """Files as they are; directories as nginx's autoindex, like kernel.org."""

    def log_message(self, *args):
        pass

    def list_directory(self, path):
        rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        rows = ['<a href="../">../</a>']
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            shown = name + "/" if os.path.isdir(full) else name
            size = "-" if os.path.isdir(full) else str(os.path.getsize(full))
            date = time.strftime("%d-%b-%Y %H:%M", time.gmtime(os.path.getmtime(full)))
            rows.append(f'<a href="{urllib.parse.quote(shown)}">{html.escape(shown)}</a>'
                        f'{" " * max(1, 51 - len(shown))}{date} {size:>19}')
        body = (f"<html>\r\n<head><title>Index of {rel}</title></head>\r\n<body>\r\n"
                f"<h1>Index of {rel}</h1><hr><pre>" + "\r\n".join(rows) + "\r\n</pre><hr></body>\r\n</html>\r\n")
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Date", formatdate(usegmt=True))
        self.end_headers()
        return BytesIO(data)


@contextlib.contextmanager
def serve(root: Path):
    """http://127.0.0.1:PORT serving root, in a thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_KernelOrgHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- small real trees

def subset_tree(src612, dest: Path, extra: dict[str, str] | None = None) -> Path:
    """dest/ with SUBSET copied from the real 6.12 tree, plus extra files."""
    for rel in SUBSET:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src612.path / rel, dest / rel)
    for rel, text in (extra or {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    return dest


def make_tarball(tree: Path, out: Path, top: str = "linux-6.12", compress: str = "xz") -> Path:
    """A reproducible tarball of tree with one top directory, like kernel.org's."""
    stage = out.parent / f".stage-{out.name}"
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(tree, stage / top)
    tar = ["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner", "-C", str(stage),
           "-cf", "-", top]
    data = subprocess.run(tar, check=True, capture_output=True).stdout
    if compress == "xz":
        data = subprocess.run(["xz", "-T1", "-c"], input=data, check=True, capture_output=True).stdout
    elif compress == "gz":
        data = subprocess.run(["gzip", "-n", "-c"], input=data, check=True, capture_output=True).stdout
    out.write_bytes(data)
    shutil.rmtree(stage)
    return out


GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}


def git(*args, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True)
    return done.stdout.strip()
