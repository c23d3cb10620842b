"""Kernel source trees from a source spec, cached and identified.

Specs (``rtforge kernel build --source SPEC``):

    rpi[:BRANCH]     raspberrypi/linux, shallow clone of BRANCH; without one,
                     the repository's default branch (the one Raspberry Pi OS
                     is built from).  URL: $RTFORGE_RPI_GIT_URL or RPI_GIT_URL.
    git:URL[@REF]    any git repository; REF (after the last '@') is a branch,
                     a tag or a full commit hash; default: the remote's HEAD
    tar:PATH|URL     a .tar, .tar.gz, .tar.xz (.bz2, .zst) release tarball
    dir:PATH         a tree on disk, used in place and never written to
    debian[:X.Y[=VERSION]|:latest]  Debian's linux-source-X.Y from any Debian
                     suite (bookworm ... sid), downloaded and verified by apt
                     into the cache (debian.py), or the installed one; =VERSION
                     exactly that package version (what `--match` asks for);
                     :latest the newest series any suite offers; no version:
                     the newest installed, else latest

Every tree except dir: is extracted or checked out once into
cache_dir()/kernel/src/<key>/ (layout: fetch.py) and reused; the tree is
never written afterwards (builds use O=, RT patches go into a copy, see
rtpatch.py).  Git checkouts drop their .git after the commit is verified, so
a tree builds like a release tarball (no "-dirty"/"+" from setlocalversion).

dir: trees are not copied and never modified: rtforge builds out of tree
(O=), and when an RT patch is needed rtpatch.py patches a full copy, since
patching a user's tree in place could destroy work and a hard-link copy
would silently follow later in-place edits of the user's files.

The source id records exactly what was built:
    git      git:<url>@<40-hex commit> (branch <name>)
    tar      tar:<file name> sha256:<hex>
    debian   debian:linux-source-X.Y=<package version>
    dir      dir:<real path>@git:<commit>[+dirty] (read without running git in the tree: treeid.py), or, outside git,
             dir:<real path>@files:<count>,newest:<ISO mtime> (cheap; not a content hash)

API:
    parse_source_spec(text) -> SourceSpec           UserError (exit 2) on a bad spec
    prepare_source(spec, progress=None) -> KernelSource
    read_kernel_version(tree) -> KernelVersion
    detect_flavour(tree) -> "raspberrypi" | "mainline"
    progress(what: str, done: int | None, total: int | None) is called during
    long steps; nothing is printed.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..errors import UserError
from ..paths import read_regular_bounded, resolved
from . import debian, fetch, treeid
from .fetch import Progress, report

RPI_GIT_URL = "https://github.com/raspberrypi/linux"
ENV_RPI_GIT_URL = "RTFORGE_RPI_GIT_URL"
FLAVOUR_RPI, FLAVOUR_MAINLINE = "raspberrypi", "mainline"
# Defconfigs only the Raspberry Pi tree has; any one marks the flavour.
RPI_MARKERS = ("arch/arm64/configs/bcm2711_defconfig", "arch/arm64/configs/bcm2712_defconfig",
               "arch/arm/configs/bcmrpi_defconfig", "arch/arm/configs/bcm2709_defconfig")
SPEC_HELP = "use rpi[:BRANCH], git:URL[@REF], tar:PATH|URL, dir:PATH or debian[:X.Y|:latest]"
# Only the transports a kernel repository is served over: never git's ext::
# or fd:: (which run or read what the URL says), whatever the host's config allows.
_GIT_ENV = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh"}
MAKEFILE_MAX = 1 << 20     # the top Makefile: ~70 kB
_GIT_PROGRESS = re.compile(r"(Receiving objects|Resolving deltas|Updating files):\s+\d+% \((\d+)/(\d+)\)")


@dataclass(frozen=True, order=True)
class KernelVersion:
    version: int
    patchlevel: int
    sublevel: int
    extraversion: str = ""

    @property
    def series(self) -> str:
        """'6.12': the directory name under kernel.org's projects/rt/."""
        return f"{self.version}.{self.patchlevel}"

    def __str__(self) -> str:
        return f"{self.version}.{self.patchlevel}.{self.sublevel}{self.extraversion}"


@dataclass(frozen=True)
class SourceSpec:
    kind: str                 # rpi, git, tar, dir, debian
    location: str = ""        # URL, path or Debian series (X.Y); "" = default
    ref: str | None = None    # git branch/tag/commit; None = remote HEAD

    @property
    def text(self) -> str:
        if self.kind == "rpi":
            return "rpi" + (f":{self.ref}" if self.ref else "")
        if self.kind == "git":
            return f"git:{self.location}" + (f"@{self.ref}" if self.ref else "")
        if self.kind == "debian" and self.ref:
            return f"debian:{self.location}={self.ref}"
        return self.kind + (f":{self.location}" if self.location else "")


@dataclass(frozen=True)
class KernelSource:
    spec: str                 # normalised spec
    kind: str
    path: Path                # the tree: read it, build from it with O=, never write it
    source_id: str
    key: str                  # cache key, a path component; names derived trees
    version: KernelVersion
    flavour: str              # raspberrypi | mainline
    origin: str               # URL or path it came from
    in_place: bool = False    # dir: the user's own tree
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"spec": self.spec, "kind": self.kind, "path": str(self.path), "source_id": self.source_id,
                "key": self.key, "version": str(self.version), "flavour": self.flavour, "origin": self.origin,
                "in_place": self.in_place, "notes": list(self.notes)}


# ---------------------------------------------------------------- spec parsing

def _split_git_ref(rest: str) -> tuple[str, str | None]:
    """'URL@REF' -> (URL, REF), leaving the '@' of user@host and scp-style
    'git@host:path' alone."""
    if "@" not in rest:
        return rest, None
    url, ref = rest.rsplit("@", 1)
    if not url or not ref or ":" in ref:
        return rest, None
    if "://" in url and "/" not in url.split("://", 1)[1]:
        return rest, None      # https://user@host/path: the '@' is the user's
    return url, ref


def check_git_words(url: str | None, ref: str | None, shown: str) -> None:
    """A URL or ref that git would read as an option (`--upload-pack=CMD`
    runs CMD) is refused; both are also passed after `--` (architecture rule 12)."""
    for what, word in (("URL", url), ("branch, tag or commit", ref)):
        if word is not None and (word.startswith("-") or any(ord(c) < 32 for c in word)):
            example = "https://host/linux.git" if what == "URL" else "rpi-6.12.y"
            raise UserError(f"{shown}: a git {what} cannot start with '-' or hold control characters (git would "
                            f"take it as an option): give the repository's own {what}, e.g. {example}")


def parse_source_spec(text: str) -> SourceSpec:
    text = (text or "").strip()
    kind, sep, rest = text.partition(":")
    rest = rest.strip()
    if kind == "rpi":
        check_git_words(None, rest or None, f"'{text}'")
        return SourceSpec("rpi", "", rest or None)
    if kind == "debian":
        series, eq, version = rest.partition("=")
        if sep and not (re.fullmatch(r"\d+\.\d+|latest", series) and
                        (not eq or (series != "latest" and re.fullmatch(r"[0-9][A-Za-z0-9.+~:-]*", version)))):
            raise UserError(f"'{text}': the Debian source is debian, debian:X.Y (e.g. debian:6.12), "
                            f"debian:X.Y=VERSION (one package version, e.g. debian:6.12=6.12.117-1) or debian:latest")
        return SourceSpec("debian", series, version or None)
    if kind in ("git", "tar", "dir"):
        if not rest:
            example = {"git": "git:https://host/linux.git@v6.12", "tar": "tar:linux-6.12.tar.xz",
                       "dir": "dir:~/src/linux"}[kind]
            raise UserError(f"'{text}' needs a location after '{kind}:', e.g. {example}")
        if kind == "git":
            url, ref = _split_git_ref(rest)
            check_git_words(url, ref, f"'{text}'")
            return SourceSpec("git", url, ref)
        return SourceSpec(kind, rest if fetch.is_url(rest) else str(Path(rest).expanduser()))
    hint = ""
    if text and Path(text).expanduser().exists():
        hint = f" (did you mean {'dir' if Path(text).expanduser().is_dir() else 'tar'}:{text}?)"
    raise UserError(f"unknown kernel source '{text}': {SPEC_HELP}{hint}")


# ---------------------------------------------------------------- tree facts

def read_kernel_version(tree: Path) -> KernelVersion:
    """VERSION/PATCHLEVEL/SUBLEVEL/EXTRAVERSION of the top Makefile."""
    makefile = Path(tree) / "Makefile"
    try:  # a regular file, bounded: a FIFO or a link to /dev/zero would never answer
        head = read_regular_bounded(makefile, MAKEFILE_MAX, str(makefile)).decode(errors="replace").splitlines()[:30]
    except OSError:
        raise UserError(f"{tree} is not a Linux kernel source tree (no top-level Makefile)") from None
    vals = {}
    for line in head:
        m = re.match(r"^(VERSION|PATCHLEVEL|SUBLEVEL|EXTRAVERSION)\s*=\s*(.*?)\s*$", line)
        if m and m.group(1) not in vals:
            vals[m.group(1)] = m.group(2)
    try:
        return KernelVersion(int(vals["VERSION"]), int(vals["PATCHLEVEL"]), int(vals.get("SUBLEVEL") or 0),
                             vals.get("EXTRAVERSION", ""))
    except (KeyError, ValueError):
        raise UserError(f"{tree} is not a Linux kernel source tree (its Makefile has no VERSION/PATCHLEVEL)") from None


def detect_flavour(tree: Path) -> str:
    return FLAVOUR_RPI if any((Path(tree) / m).is_file() for m in RPI_MARKERS) else FLAVOUR_MAINLINE


def _check_tree(tree: Path, what: str) -> KernelVersion:
    version = read_kernel_version(tree)
    if not (tree / "Kconfig").is_file() or not (tree / "arch").is_dir():
        raise UserError(f"{what} is not a Linux kernel source tree (no Kconfig or arch/ next to its Makefile)")
    return version


def _find_root(extracted: Path, what: str) -> Path:
    """The kernel tree inside an extracted archive: the archive's single
    top-level directory, or the extraction directory itself."""
    if (extracted / "Makefile").is_file():
        return extracted
    entries = [p for p in extracted.iterdir() if not p.name.startswith(".")] if extracted.is_dir() else []
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() and \
            (entries[0] / "Makefile").is_file():
        return entries[0]
    raise UserError(f"{what} does not contain a Linux kernel source tree (expected one top directory with a Makefile)")


def _make_source(spec: SourceSpec, path: Path, source_id: str, key: str, origin: str, *,
                 in_place: bool = False, notes: tuple[str, ...] = ()) -> KernelSource:
    return KernelSource(spec=spec.text, kind=spec.kind, path=path, source_id=source_id, key=key,
                        version=read_kernel_version(path), flavour=detect_flavour(path), origin=origin,
                        in_place=in_place, notes=notes)


def _cached(key: str) -> tuple[Path, dict | None]:
    tree = fetch.kernel_cache() / "src" / key
    meta = fetch.read_json(tree.with_name(key + ".json")) if tree.is_dir() else None
    return tree, meta


def _extract_once(key: str, archive: Path, source_id: str, origin: str, progress: Progress) -> Path:
    """The cached tree for key, extracted from archive if not there yet."""
    with fetch.locked(key):
        tree, meta = _cached(key)
        if meta is not None:
            return tree
        with fetch.building(tree) as stage:
            fetch.extract_tar(archive, stage.dir, progress, f"extracting {archive.name}")
            fetch.check_entries(stage.dir, str(archive))
            stage.root = _find_root(stage.dir, str(archive))
            _check_tree(stage.root, str(archive))
            fetch.write_json(tree.with_name(key + ".json"),
                             {"source_id": source_id, "origin": origin, "created": time.time()})
        return tree


# ---------------------------------------------------------------- kinds

def _tar(spec: SourceSpec, progress: Progress) -> KernelSource:
    if fetch.is_url(spec.location):
        archive = fetch.download(spec.location, progress)
        name = fetch.url_basename(spec.location)
    else:
        archive = Path(spec.location)
        if not archive.is_file():
            raise UserError(f"tar: {archive} does not exist or is not a file")
        name = archive.name
    fetch.tar_compression(archive)      # fail early on something that is not a tarball
    digest = fetch.sha256_file(archive, progress, f"hashing {name}")
    key = f"tar-{digest[:16]}"
    source_id = f"tar:{name} sha256:{digest}"
    tree = _extract_once(key, archive, source_id, spec.location, progress)
    return _make_source(spec, tree, source_id, key, spec.location)


def _debian(spec: SourceSpec, progress: Progress) -> KernelSource:
    src = debian.resolve(spec.location or None, progress, version=spec.ref)
    key = fetch.safe_name(f"debian-{src.package}-{src.version}")
    source_id = f"debian:{src.package}={src.version}"
    origin = str(src.tarball) if src.origin == "installed" else f"{src.package} {src.version} ({src.origin})"
    tree = _extract_once(key, src.tarball, source_id, origin, progress)
    return _make_source(SourceSpec("debian", src.series, spec.ref), tree, source_id, key, origin)


def _dir(spec: SourceSpec, progress: Progress) -> KernelSource:
    tree = resolved(spec.location, f"dir:{spec.location}")
    if not tree.is_dir():
        raise UserError(f"dir: {spec.location} is not a directory")
    _check_tree(tree, f"dir:{spec.location}")
    # Kbuild refuses O= builds from a configured tree; say so now, not after a download.
    for leftover in (".config", "include/config"):
        if (tree / leftover).exists():
            raise UserError(f"dir:{spec.location} has build output ({leftover}); rtforge builds out of tree and "
                            f"never writes into yours, so run `make mrproper` there (or use a clean copy)")
    report(progress, f"identifying {tree}")
    ident = treeid.identity(tree)    # nothing of the tree's own is run (treeid.py)
    source_id = f"dir:{tree}@{ident}"
    key = "dir-" + hashlib.sha256(source_id.encode()).hexdigest()[:16]
    return _make_source(SourceSpec("dir", str(tree)), tree, source_id, key, str(tree), in_place=True)


# ---------------------------------------------------------------- git

def _ls_remote(url: str, ref: str | None) -> tuple[str, str]:
    """(commit, ref name) of ref at url; ref None = the remote HEAD's branch."""
    argv = ["git", "ls-remote", "--symref", "--", url, "HEAD"] if ref is None else ["git", "ls-remote", "--", url]
    if shutil.which("git") is None:
        raise UserError("git is not installed: apt-get install git")
    p = subprocess.run(argv, capture_output=True, text=True, env=_GIT_ENV, stdin=subprocess.DEVNULL, timeout=120)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        raise ConnectionError(last)
    refs: dict[str, str] = {}
    branch = None
    for line in p.stdout.splitlines():
        left, _, name = line.partition("\t")
        if left.startswith("ref: "):
            branch = left[5:].removeprefix("refs/heads/")
        else:
            refs[name] = left
    if ref is None:
        if "HEAD" not in refs:
            raise UserError(f"{url} has no default branch (HEAD): give a branch, e.g. @main")
        return refs["HEAD"], branch or "HEAD"
    for name in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}"):
        if name in refs:
            return refs[name], ref
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return ref, ref
    raise UserError(f"{url} has no branch or tag '{ref}' (a commit must be given as its full 40-digit hash)")


def _fetch_ref(into: Path, url: str, ref: str, progress: Progress) -> tuple[int, list[str]]:
    proc = subprocess.Popen(["git", "-C", str(into), "fetch", "--depth", "1", "--progress", "--", url, ref],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_GIT_ENV, stdin=subprocess.DEVNULL)
    tail = b""
    lines: list[str] = []
    assert isinstance(proc.stderr, io.BufferedReader)   # stderr=PIPE, unbuffered=False: read1 is there
    try:
        while chunk := proc.stderr.read1(4096):
            tail += chunk
            *done, tail = re.split(rb"[\r\n]", tail)
            for raw in done:
                text = raw.decode(errors="replace").strip()
                if text:
                    lines = (lines + [text])[-5:]
                if m := _GIT_PROGRESS.search(text):
                    report(progress, f"git: {m.group(1).lower()}", int(m.group(2)), int(m.group(3)))
        return proc.wait(), lines
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _git_checkout(url: str, commit: str, ref: str, into: Path, progress: Progress) -> None:
    """Shallow fetch + detached checkout of exactly commit.  By hash first
    (GitHub and local repositories allow it); servers that refuse get the ref
    by name, and then it must still be the commit ls-remote saw."""
    fetch.run(["git", "init", "-q", str(into)], what="git init")
    rc, lines = _fetch_ref(into, url, commit, progress)
    if rc != 0 and ref != commit:
        rc, lines = _fetch_ref(into, url, ref, progress)
    if rc != 0:
        raise UserError(f"git fetch of {ref} from {url} failed: {(lines or [f'exit status {rc}'])[-1]}")
    report(progress, "git: checking out")
    fetch.run(["git", "-C", str(into), "-c", "advice.detachedHead=false", "checkout", "-q", "--detach", "FETCH_HEAD"],
              what="git checkout")
    got = fetch.run(["git", "-C", str(into), "rev-parse", "HEAD"], what="git rev-parse").stdout.strip()
    if got != commit:
        raise UserError(f"{ref} of {url} moved from {commit[:12]} to {got[:12]} while fetching: run again")


def _git(spec: SourceSpec, progress: Progress, shown: str | None = None) -> KernelSource:
    url = spec.location
    check_git_words(url, spec.ref, shown or f"'{spec.text}'")
    refs_file = fetch.kernel_cache() / "git-refs.json"
    seen_key = f"{url}@{spec.ref or 'HEAD'}"
    notes: tuple[str, ...] = ()
    report(progress, f"asking {url} for {spec.ref or 'its default branch'}")
    try:
        commit, branch = _ls_remote(url, spec.ref)
    except (ConnectionError, subprocess.TimeoutExpired) as e:
        # Offline: the last commit this URL@ref resolved to, if its tree is cached.
        last = (fetch.read_json(refs_file) or {}).get(seen_key)
        if not last or _cached(f"git-{last['commit']}")[1] is None:
            raise UserError(f"cannot reach {url}: {e}") from None
        commit, branch = last["commit"], last["branch"]
        when = datetime.fromtimestamp(last["time"], UTC).strftime("%Y-%m-%d %H:%M UTC")
        notes = (f"could not reach {url} ({e}); using the cached {branch} at {commit[:12]} from {when}",)
    key = f"git-{commit}"
    source_id = f"git:{url}@{commit}"
    with fetch.locked(key):
        tree, meta = _cached(key)
        if meta is None:
            with fetch.building(tree) as stage:
                _git_checkout(url, commit, branch, stage.dir, progress)
                shutil.rmtree(stage.dir / ".git")
                fetch.check_entries(stage.dir, f"{url}@{branch}")   # git checks out links to anywhere
                _check_tree(stage.dir, f"{url}@{branch}")
                fetch.write_json(tree.with_name(key + ".json"),
                                 {"source_id": source_id, "origin": url, "branch": branch, "created": time.time()})
    if not notes:
        seen = fetch.read_json(refs_file) or {}
        seen[seen_key] = {"commit": commit, "branch": branch, "time": time.time()}
        fetch.write_json(refs_file, seen)
    if branch not in (commit, "HEAD"):
        source_id += f" (branch {branch})"
    return _make_source(spec, tree, source_id, key, url, notes=notes)


def prepare_source(spec: str | SourceSpec, progress: Progress = None) -> KernelSource:
    """The tree for spec, fetched/extracted into the cache unless already there."""
    s = parse_source_spec(spec) if isinstance(spec, str) else spec
    if s.kind == "rpi":
        url = os.environ.get(ENV_RPI_GIT_URL) or RPI_GIT_URL
        src = _git(SourceSpec("git", url, s.ref), progress, f"{ENV_RPI_GIT_URL}={url!r}" if url != RPI_GIT_URL else
                   f"'{s.text}'")
        return KernelSource(**{**src.__dict__, "spec": s.text, "kind": "rpi"})
    return {"git": _git, "tar": _tar, "dir": _dir, "debian": _debian}[s.kind](s, progress)
