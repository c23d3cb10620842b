"""RT enablement: is PREEMPT_RT a configuration choice in this tree for this
architecture, and if not, which RT patch makes it one, applied safely.

Detection reads Kconfig only (nothing is built): the tree supports RT when
kernel/Kconfig.preempt has ``config PREEMPT_RT`` and, if the option
``depends on ... ARCH_SUPPORTS_RT`` (5.3 and later), some Kconfig file under
arch/<srcarch>/ has ``select ARCH_SUPPORTS_RT``.  Mainline has the option
since 5.3; x86, arm64 and riscv select the symbol since 6.12 (6.12's arch/arm
does not, so a 32-bit Pi kernel of that series needs the out-of-tree patch),
and by 7.3 arch/arm and loongarch select it too (Debian's linux-source-7.3),
so a 32-bit Pi kernel from 7.x needs none.  Detection reads each tree, so
none of this is assumed.  RT patches
before 5.3 named the option PREEMPT_RT_FULL; ``RtSupport.symbol`` says which
one the config step must request, ``RtSupport.depends_on`` what it depends on
(6.12: EXPERT && ARCH_SUPPORTS_RT — without EXPERT olddefconfig drops it).

RT patches (``--rt-patch``):
    PATH|URL   one patch (.patch/.diff, or compressed .gz/.xz/.bz2) or a
               series: kernel.org's patches-*.tar.xz, or a directory with a
               quilt ``series`` file
    auto       kernel.org's layout under BASE/projects/rt/X.Y/ and .../older/
               (BASE: $RTFORGE_RT_BASE_URL or RT_BASE_URL; directory listings
               are HTML indexes whose hrefs are read): the exact sublevel's
               patch with the highest -rtN first, then the nearest sublevels
               (older first on a tie), at most MAX_AUTO_CANDIDATES in all

Applying never touches the cached pristine tree: a single patch is first
proven with ``patch --dry-run`` against it; then the tree is copied into a
temp directory next to cache/kernel/rt/<source key>+rt-<patch sha>/, the
patch applied there, PREEMPT_RT detected again (a patch that applies but does
not enable RT for this architecture is a failure), and only then the copy is
renamed into place.  The copy is a hard-link copy (``cp -al``): GNU patch
writes a new file and renames it over the old name, so a patched file gets a
new inode and the pristine tree's file keeps its content (checked by
tests/integration/test_rtpatch.py).  A series is proven in that throwaway copy rather than
with --dry-run, because patch --dry-run cannot see what the series' earlier
patches would have changed (GNU patch 2.7.6 fails a dry run of two dependent
patches to one file).  dir: sources are copied in full (``cp -a``), never
hard-linked: a user editing their tree in place would change our copy too.

API:
    detect_rt(tree, arch) -> RtSupport
    rt_symbol_for(version) -> "PREEMPT_RT" | "PREEMPT_RT_FULL"
    load_rt_patch(path_or_url, progress=None) -> RtPatch
    list_rt_candidates(version, base_url=None) -> list[Candidate]
    prepare_rt_tree(source, arch, rt_patch=None, progress=None, base_url=None) -> RtTree
        rt_patch None: configuration only, UserError if the tree cannot do it
        rt_patch "auto": no patch if the tree can, else kernel.org's
        rt_patch PATH|URL: that patch (or series), always applied
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..paths import read_regular_bounded, resolved
from . import fetch
from .boards import srcarch_of
from .fetch import Progress, report
from .sources import KernelSource, KernelVersion

RT_BASE_URL = "https://cdn.kernel.org/pub/linux/kernel"
ENV_RT_BASE_URL = "RTFORGE_RT_BASE_URL"
MAX_AUTO_CANDIDATES = 4
_PATCH_NAME = re.compile(r"^patch-(\d+)\.(\d+)(?:\.(\d+))?-rt(\d+)\.patch\.(xz|gz)$")
_SERIES_NAME = re.compile(r"^patches-(\d+)\.(\d+)(?:\.(\d+))?-rt(\d+)\.tar\.(xz|gz)$")
# magic -> opener; each returns a readable binary file (their own classes: Any)
_OPENERS: dict[bytes, Callable[..., Any]] = {b"\xfd7zXZ\x00": lzma.open, b"\x1f\x8b": gzip.open, b"BZh": bz2.open}


# ---------------------------------------------------------------- detection

@dataclass(frozen=True)
class RtSupport:
    srcarch: str
    supported: bool               # PREEMPT_RT can be chosen by configuration alone
    symbol: str | None            # PREEMPT_RT or PREEMPT_RT_FULL (None: no option in the tree)
    depends_on: tuple[str, ...]   # the option's `depends on` expressions
    arch_selects: bool            # arch/<srcarch> selects ARCH_SUPPORTS_RT
    arch_condition: str           # the `if ...` of that select, "" if unconditional
    reason: str                   # one sentence, for messages

    @property
    def needs_expert(self) -> bool:
        return any(re.search(r"\bEXPERT\b", d) for d in self.depends_on)


def _kconfig_entry(text: str, symbol: str) -> list[str] | None:
    """The lines of `config SYMBOL` up to the next top-level Kconfig keyword."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.fullmatch(rf"(menu)?config\s+{symbol}\s*", line.strip()) and not line.startswith((" ", "\t")):
            body = []
            for nxt in lines[i + 1:]:
                if nxt and not nxt[0].isspace() and not nxt.startswith("#"):
                    break
                body.append(nxt.strip())
            return body
    return None


def _arch_select(tree: Path, srcarch: str) -> tuple[bool, str]:
    pattern = re.compile(r"^\s*select\s+ARCH_SUPPORTS_RT\b(?:\s+if\s+([^#]+?))?\s*(?:#.*)?$", re.MULTILINE)
    files = sorted((tree / "arch" / srcarch).rglob("Kconfig*"))
    for f in files:
        if f.is_file() and (m := pattern.search(f.read_text(errors="replace"))):
            return True, (m.group(1) or "").strip()
    return False, ""


def detect_rt(tree: Path, arch: str) -> RtSupport:
    """Can PREEMPT_RT be enabled by configuration in tree for arch (Kbuild ARCH)?"""
    srcarch = srcarch_of(arch)
    tree = Path(tree)
    try:  # a tree's file: regular and bounded (a FIFO would never answer)
        text = read_regular_bounded(tree / "kernel" / "Kconfig.preempt", 1 << 20,
                                    f"{tree}/kernel/Kconfig.preempt").decode(errors="replace")
    except OSError:
        return RtSupport(srcarch, False, None, (), False, "", "the tree has no kernel/Kconfig.preempt")
    selects, condition = _arch_select(tree, srcarch)
    old = _kconfig_entry(text, "PREEMPT_RT_FULL")
    if old is not None:
        deps = tuple(d.removeprefix("depends on").strip() for d in old if d.startswith("depends on"))
        return RtSupport(srcarch, True, "PREEMPT_RT_FULL", deps, selects, condition,
                         "the tree carries an RT patch with the old PREEMPT_RT_FULL option (before 5.3)")
    entry = _kconfig_entry(text, "PREEMPT_RT")
    if entry is None:
        return RtSupport(srcarch, False, None, (), selects, condition,
                         "kernel/Kconfig.preempt has no PREEMPT_RT option")
    deps = tuple(d.removeprefix("depends on").strip() for d in entry if d.startswith("depends on"))
    if any("ARCH_SUPPORTS_RT" in d for d in deps) and not selects:
        return RtSupport(srcarch, False, "PREEMPT_RT", deps, False, "",
                         f"kernel/Kconfig.preempt has PREEMPT_RT, but arch/{srcarch} does not select ARCH_SUPPORTS_RT")
    why = f"PREEMPT_RT is a configuration option for arch/{srcarch}"
    return RtSupport(srcarch, True, "PREEMPT_RT", deps, selects, condition,
                     why + (f" (when {condition})" if condition else ""))


def rt_symbol_for(version: KernelVersion) -> str:
    """The option an RT patch for this version provides (renamed in 5.3)."""
    return "PREEMPT_RT_FULL" if (version.version, version.patchlevel) < (5, 3) else "PREEMPT_RT"


# ---------------------------------------------------------------- patches

@dataclass(frozen=True)
class RtPatch:
    name: str                     # as published: patch-6.1.192-rt83.patch.xz, patches-…tar.xz, a directory
    origin: str                   # URL or path
    patch_id: str                 # "<name> sha256:<hex>" (directory: hash of series + patches)
    files: tuple[Path, ...]       # plain patches, in application order
    strip: tuple[int, ...]        # patch -pN for each
    series: bool

    @property
    def content_key(self) -> str:
        """Names the patched tree: the same patch .xz, .gz or plain is one tree."""
        h = hashlib.sha256()
        for f, level in zip(self.files, self.strip):
            h.update(f"-p{level}\0".encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
        return h.hexdigest()[:16]


def _looks_like_patch(text: str) -> bool:
    return bool(re.search(r"^(--- |\+\+\+ |diff --git )", text, re.MULTILINE))


def _read_series(folder: Path, what: str) -> tuple[tuple[Path, ...], tuple[int, ...]]:
    candidates = [folder / "series"] + sorted(folder.glob("*/series"))
    series = next((c for c in candidates if c.is_file()), None)
    if series is None:
        raise UserError(f"{what} has no quilt 'series' file listing its patches")
    files, strip = [], []
    for line in series.read_text(errors="replace").splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        p = series.parent / words[0]
        if not p.is_file():
            raise UserError(f"{what}: the series lists {words[0]}, which is not there")
        files.append(p)
        level = next((int(w[2:]) for w in words[1:] if re.fullmatch(r"-p\d", w)), 1)
        strip.append(level)
    if not files:
        raise UserError(f"{what}: its series file lists no patches")
    return tuple(files), tuple(strip)


def _unpack(original: Path, name: str, origin: str, progress: Progress) -> RtPatch:
    digest = fetch.sha256_file(original)
    key = f"patch-{digest[:16]}"
    folder = fetch.kernel_cache() / "rtpatches" / key
    with open(original, "rb") as f:
        head = f.read(6)
    opener = next((o for magic, o in _OPENERS.items() if head.startswith(magic)), open)
    with fetch.locked(key):
        if not folder.is_dir():
            with fetch.building(folder) as stage:
                report(progress, f"unpacking {name}")
                plain = stage.dir / "plain"
                try:
                    with opener(original, "rb") as src, open(plain, "wb") as out:
                        shutil.copyfileobj(src, out, fetch.CHUNK)
                except (OSError, EOFError, lzma.LZMAError) as e:
                    raise UserError(f"cannot decompress the RT patch {name}: {e}") from None
                if tarfile.is_tarfile(plain):
                    (stage.dir / "series").mkdir()
                    fetch.extract_tar(plain, stage.dir / "series", progress, f"unpacking {name}")
                    plain.unlink()
                else:
                    plain.rename(stage.dir / "patch")
    if (folder / "series").is_dir():
        files, strip = _read_series(folder / "series", name)
        return RtPatch(name, origin, f"{name} sha256:{digest}", files, strip, True)
    text = (folder / "patch").read_text(errors="replace")
    if not _looks_like_patch(text):
        raise UserError(f"{name} is not a patch (it has no ---/+++ or diff --git lines)")
    return RtPatch(name, origin, f"{name} sha256:{digest}", (folder / "patch",), (1,), False)


def load_rt_patch(spec: str, progress: Progress = None) -> RtPatch:
    """A patch or series from a path or an http(s) URL."""
    if fetch.is_url(spec):
        return _unpack(fetch.download(spec, progress), fetch.url_basename(spec), spec, progress)
    path = Path(spec).expanduser()
    if path.is_dir():
        files, strip = _read_series(path, f"--rt-patch {spec}")
        h = hashlib.sha256()
        for f in [next(p for p in [path / "series", *path.glob("*/series")] if p.is_file()), *files]:
            h.update(f.read_bytes())
        origin = str(resolved(path, f"--rt-patch {spec}"))
        return RtPatch(path.name, origin, f"{path.name} (series of {len(files)}) sha256:{h.hexdigest()}", files, strip,
                       True)
    if not path.is_file():
        raise UserError(f"--rt-patch {spec}: no such file or directory (give a patch, a series, a URL or 'auto')")
    return _unpack(path, path.name, str(resolved(path, f"--rt-patch {spec}")), progress)


# ---------------------------------------------------------------- kernel.org listings

class _Hrefs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def index_names(html: str) -> list[str]:
    """File names linked from an HTML directory index (nginx/Apache/python's)."""
    parser = _Hrefs()
    parser.feed(html)
    return [fetch.url_basename(h) for h in parser.hrefs if not h.endswith("/") and "?" not in h]


@dataclass(frozen=True)
class Candidate:
    name: str
    url: str
    sublevel: int
    rt: int
    series: bool


def rt_base_url(base_url: str | None = None) -> str:
    return (base_url or os.environ.get(ENV_RT_BASE_URL) or RT_BASE_URL).rstrip("/")


def list_rt_candidates(version: KernelVersion, base_url: str | None = None) -> list[Candidate]:
    """The RT patches worth trying for version, best first."""
    folder = f"{rt_base_url(base_url)}/projects/rt/{version.series}/"
    found: dict[str, Candidate] = {}
    for url in (folder, folder + "older/"):
        try:
            names = index_names(fetch.fetch_text(url))
        except fetch.Unreachable:
            raise
        except UserError:
            if url == folder:
                raise UserError(
                    f"no RT patches for {version.series} found at {folder} "
                    "(kernel.org has none for this series, or it is unreachable): use --rt-patch FILE"
                ) from None
            continue
        for name in names:
            m = _PATCH_NAME.match(name) or _SERIES_NAME.match(name)
            if m and (int(m.group(1)), int(m.group(2))) == (version.version, version.patchlevel):
                found.setdefault(name, Candidate(name, url + name, int(m.group(3) or 0), int(m.group(4)),
                                                 name.startswith("patches-")))
    best: dict[int, Candidate] = {}
    # per sublevel: highest -rtN, a single patch before a series, .xz before .gz
    for c in sorted(found.values(), key=lambda c: (-c.rt, c.series, not c.name.endswith(".xz"))):
        best.setdefault(c.sublevel, c)
    order = sorted(best.values(), key=lambda c: (abs(c.sublevel - version.sublevel), c.sublevel > version.sublevel))
    return order[:MAX_AUTO_CANDIDATES]


# ---------------------------------------------------------------- applying


@dataclass(frozen=True)
class Attempt:
    name: str
    ok: bool
    why: str


@dataclass(frozen=True)
class RtTree:
    path: Path  # build from here (the source's own tree when no patch was needed)
    source: KernelSource
    support: RtSupport  # detected in path, for the arch asked
    patch: RtPatch | None
    attempts: tuple[Attempt, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def patch_id(self) -> str | None:
        return self.patch.patch_id if self.patch else None

    @property
    def option(self) -> str:
        """The option that makes this tree real-time: PREEMPT_RT, or the
        PREEMPT_RT_FULL of RT patches before 5.3."""
        if self.support.symbol is None:
            # prepare_rt_tree hands out only trees detect_rt found supported, and those name their option
            raise RuntimeError(f"{self.path}: no PREEMPT_RT option to build with ({self.support.reason})")
        return self.support.symbol

    def to_dict(self) -> dict:
        s = self.support
        return {"path": str(self.path), "source_id": self.source.source_id, "rt_patch_id": self.patch_id,
                "rt_symbol": s.symbol, "rt_depends_on": list(s.depends_on), "rt_reason": s.reason,
                "attempts": [vars(a) for a in self.attempts], "notes": list(self.notes)}


class _Failed(Exception):
    pass


def _why(output: str) -> str:
    """patch's output -> what went wrong, in one line."""
    failed, missing, reversed_ = [], [], []
    current = ""
    looking = False  # after "can't find file": the header that follows names it
    for line in output.splitlines():
        if m := re.match(r"(?:checking|patching) file (.+)", line):
            current = m.group(1).strip()
        elif line.startswith("can't find file to patch"):
            looking = True
        elif looking and (m := re.match(r"\|\+\+\+ (?:b/)?(\S+)", line)):
            missing.append(m.group(1))
            looking = False
        elif "FAILED" in line and current and current not in failed:
            failed.append(current)
        elif "Reversed (or previously applied)" in line and current:
            reversed_.append(current)
    parts = []
    for label, files in (("hunks fail in", failed), ("files to patch are missing:", missing),
                         ("already applied to", reversed_)):
        if files:
            parts.append(f"{label} {', '.join(files[:3])}" + (f" and {len(files) - 3} more" if len(files) > 3 else ""))
    if parts:
        return "; ".join(parts)
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "patch failed"


def _patch(tree: Path, file: Path, strip: int, dry_run: bool) -> None:
    argv = ["patch", f"-p{strip}", "--batch", "--forward", "--no-backup-if-mismatch", "-d", str(tree), "-i", str(file)]
    if shutil.which("patch") is None:
        raise UserError("GNU patch is not installed: apt-get install patch")
    env = {k: v for k, v in os.environ.items() if k != "POSIXLY_CORRECT"}  # it would turn backups back on
    p = subprocess.run(
        argv + (["--dry-run"] if dry_run else []), capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL
    )
    if p.returncode != 0:
        raise _Failed(_why(p.stdout + p.stderr))


def _copy_tree(source: KernelSource, dest: Path) -> None:
    mode = "-a" if source.in_place else "-al"
    fetch.run(["cp", mode, str(source.path), str(dest)], what="copying the source tree")


def _apply(source: KernelSource, patch: RtPatch, arch: str, progress: Progress, auto: bool) -> Path:
    """The patched tree for (source, patch), made if needed; _Failed(why) if
    the patch does not apply or does not enable RT for arch."""
    key = f"{source.key}+rt-{patch.content_key}"
    final = fetch.kernel_cache() / "rt" / key
    meta = final.with_name(key + ".json")
    with fetch.locked(key):
        if final.is_dir() and meta.is_file():
            support = detect_rt(final, arch)
            if not support.supported:
                raise _Failed(f"applies, but does not enable PREEMPT_RT ({support.reason})")
            return final
        if not patch.series:
            report(progress, f"dry run of {patch.name}")
            _patch(source.path, patch.files[0], patch.strip[0], dry_run=True)
        with fetch.building(final) as stage:
            report(progress, "copying the source tree")
            stage.root = stage.dir / "tree"
            _copy_tree(source, stage.root)
            for i, (f, strip) in enumerate(zip(patch.files, patch.strip)):
                report(progress, f"applying {patch.name}", i, len(patch.files))
                try:
                    _patch(stage.root, f, strip, dry_run=False)
                except _Failed as e:
                    raise _Failed(f"{f.name} (patch {i + 1} of {len(patch.files)}): {e}" if patch.series
                                  else str(e)) from None
            support = detect_rt(stage.root, arch)
            if not support.supported:
                raise _Failed(f"applies, but does not enable PREEMPT_RT ({support.reason})")
            fetch.write_json(meta, {"source_id": source.source_id, "rt_patch_id": patch.patch_id,
                                    "origin": patch.origin, "auto": auto, "created": time.time()})
        return final


def _cached_auto(source: KernelSource, arch: str) -> tuple[Path, dict] | None:
    """The newest tree an earlier `auto` made for this source (offline re-runs)."""
    best = None
    for meta_file in (fetch.kernel_cache() / "rt").glob(f"{source.key}+rt-*.json"):
        meta = fetch.read_json(meta_file)
        tree = meta_file.with_suffix("")
        if meta and meta.get("auto") and tree.is_dir() and detect_rt(tree, arch).supported:
            if best is None or meta["created"] > best[1]["created"]:
                best = (tree, meta)
    return best


def prepare_rt_tree(source: KernelSource, arch: str, rt_patch: str | None = None, *,
                    progress: Progress = None, base_url: str | None = None) -> RtTree:
    """A tree of source in which PREEMPT_RT can be configured for arch."""
    support = detect_rt(source.path, arch)
    if rt_patch is None or (rt_patch == "auto" and support.supported):
        if not support.supported:
            raise UserError(
                f"{source.spec} ({source.version}) cannot be made real-time for {arch} by configuration: "
                f"{support.reason}; pass --rt-patch auto (kernel.org's RT patch) or --rt-patch FILE"
            )
        notes = (f"{support.reason}: no RT patch needed",) if rt_patch == "auto" else ()
        return RtTree(source.path, source, support, None, notes=notes)
    if rt_patch != "auto":
        patch = load_rt_patch(rt_patch, progress)
        try:
            path = _apply(source, patch, arch, progress, auto=False)
        except _Failed as e:
            raise UserError(
                f"the RT patch {patch.name} cannot be used on {source.spec} ({source.version}): {e}"
            ) from None
        return RtTree(path, source, detect_rt(path, arch), patch)
    try:
        candidates = list_rt_candidates(source.version, base_url)
    except fetch.Unreachable:
        cached = _cached_auto(source, arch)
        if cached is None:
            raise
        tree, meta = cached
        # Offline: reuse what auto chose before; the patch is known by its cached id only.
        patch = RtPatch(meta["rt_patch_id"].split(" sha256:")[0], meta["origin"], meta["rt_patch_id"], (), (), False)
        return RtTree(tree, source, detect_rt(tree, arch), patch,
                      notes=(f"kernel.org unreachable: reusing the earlier choice {patch.name}",))
    attempts: list[Attempt] = []
    for c in candidates:
        report(progress, f"trying {c.name}")
        try:
            patch = load_rt_patch(c.url, progress)
            path = _apply(source, patch, arch, progress, auto=True)
        except (_Failed, UserError) as e:
            attempts.append(Attempt(c.name, False, str(e)))
            continue
        made_for = f"{source.version.series}.{c.sublevel}"
        attempts.append(Attempt(c.name, True, "applies" if c.sublevel == source.version.sublevel
                                else f"applies (made for {made_for})"))
        return RtTree(path, source, detect_rt(path, arch), patch, tuple(attempts))
    tried = "; ".join(f"{a.name}: {a.why}" for a in attempts) or "none found"
    raise UserError(
        f"no RT patch from {rt_base_url(base_url)}/projects/rt/{source.version.series}/ applies to "
        f"{source.spec} ({source.version}): {tried}; pass --rt-patch FILE"
    )
