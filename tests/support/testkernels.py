"""The kernels the tests build, and their build trees kept between runs.

Every kernel a test boots is as small as what it proves (docs/testing.md,
"What each slow test proves"): one per architecture, shared by every test
that needs it --

    pi1    Debian's 7.3 for the Pi 1 / Zero board from allnoconfig plus
           tests/fixtures/kernel/pi1-lean.config (what raspi0 and raspi1ap
           need), booted by tests/e2e/test_pi_boot.py;
    arm64  Debian's 6.12 for qemu-virt-arm64 (allnoconfig plus the virt
           fragment) with 16K pages and loadable modules with
           MODVERSIONS, built by tests/e2e/test_kernel_build.py and, in the
           same build directory with the same final .config, by the
           Debian board's --match in tests/e2e/test_kernel_match_build.py
           (which then compiles nothing and only packages).

Each is built by rtforge's own build_kernel, every run, as a user builds
it.  What is kept between runs is the Kbuild build directory of a finished
build, as a tarball in the fixture cache (fixturecache.py; .ci/cleanroot
keeps that folder), keyed by everything that decides its bytes:

  - the build directory's path (Kbuild's .cmd files name absolute paths),
  - the source tree's id (Debian's package version),
  - the final .config, as rtforge's configuration step wrote it,
  - the toolchain: the cross compiler's, its binutils' and this machine's
    gcc's Debian package versions and --version,
  - rtforge's build recipe: the code that runs make (kernel/build.py,
    kbuild.py, package.py).

With that tree restored, build_kernel still runs every step -- fetch,
configure, read back, make, the RT check, packaging -- and Kbuild, by its
own dependency tracking, finds every object up to date: what is skipped is
compiling objects whose inputs are the same, which is what ccache would
skip one by one.  A changed input is a new key and a build from scratch
(from ccache where it can).  A run that restored a tree says so
("[test kernel] ... restored"), and the cold run, an empty cache, builds
all of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from rtforge.kernel.boards import get_board
from rtforge.kernel.build import BuildResult, BuildSpec, build_dir_locked, build_kernel
from rtforge.kernel.sources import prepare_source

from .fixturecache import fixture_cache

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "kernel"
RECIPE_FILES = [REPO / "src/rtforge/kernel" / name for name in ("build.py", "kbuild.py", "package.py")]
# Made again by every build (bindeb-pkg's staging, the logs): not kept.
NOT_KEPT = ["./debian", "./build.log", "./config.log"]
# Trees not used for this long are removed when another is stored.
KEEP_DAYS = 14

# What the tests' kernels are.  -K options rather than a fragment where a
# user would type them; the Pi 1's machine support is a fragment of its own.
# The arm64 kernel: the Pi 5's 16K pages (its boot test holds them to the
# .config), loadable modules as a distribution's (the module test).  The last
# two are what the Debian board's configuration in test_kernel_match_build.py
# leaves after its --match (THP selected COMPACTION; 16K pages made the ASLR
# bits' default 16): with them both builds have one final .config, and the
# second compiles nothing.
ARM64_OPTIONS = ["CONFIG_ARM64_16K_PAGES=y", "CONFIG_MODULES=y", "CONFIG_MODULE_UNLOAD=y", "CONFIG_MODVERSIONS=y",
                 "CONFIG_COMPACTION=y", "CONFIG_ARCH_MMAP_RND_BITS=16"]
KERNELS = {
    "pi1": dict(board="pi1", source="debian:7.3", defconfig="allnoconfig",
                user_fragments=[FIXTURES / "pi1-lean.config"], debs=False),
    "arm64": dict(board="qemu-virt-arm64", source="debian:6.12", options=ARM64_OPTIONS),
}


def say(msg: str) -> None:
    print(f"[test kernel] {msg}", file=sys.stderr, flush=True)


def spec_of(name: str, dist: Path) -> BuildSpec:
    return BuildSpec(**KERNELS[name], dist=dist)  # type: ignore[arg-type]


def build_test_kernel(spec: BuildSpec) -> BuildResult:
    """build_kernel(spec), starting from the kept build tree of the same
    inputs when there is one, and keeping the tree when there was none."""
    store = fixture_cache("kernels")
    store.mkdir(parents=True, exist_ok=True)
    with _locked(store / f".lock-{spec.board}"):
        configured = build_kernel(replace(spec, config_only=True))    # seconds: the final .config, for the key
        build = configured.config_path.parent
        restored = False
        # build_kernel holds the build directory while it works; between its
        # calls, another test may configure the same directory (a config-only
        # --match), so the tree is restored and kept under the same lock, and
        # kept only if its .config is still the one the key was made from.
        with build_dir_locked(build):
            key = tree_key(spec, build)
            kept = store / f"{build.parent.name}-{key}.tar.zst"
            marker = build / ".rtforge-test-tree"
            if kept.exists() and _read(marker) != key:
                t0 = time.monotonic()
                shutil.rmtree(build)
                build.mkdir(parents=True)
                subprocess.run(["tar", "-I", "zstd -T0", "-C", str(build), "-xf", str(kept)], check=True)
                os.utime(kept)            # used: kept by the pruning below
                restored = True
                say(f"{build.parent.name}: build tree restored from {kept.name} in {time.monotonic() - t0:.0f} s")
        t0 = time.monotonic()
        result = build_kernel(spec)
        say(f"{result.release} for {result.board.name}: {result.objects} objects compiled in "
            f"{time.monotonic() - t0:.0f} s{' (tree restored)' if restored else ''}")
        with build_dir_locked(build):
            if tree_key(spec, build) == key:
                marker.write_text(key)
                if not kept.exists():
                    _store(build, kept)
    return result


def tree_key(spec: BuildSpec, build: Path) -> str:
    board = get_board(spec.board)
    parts = [
        f"build directory {build}",
        f"source {source_id(spec, board.default_source)}",
        "config " + hashlib.sha256((build / ".config").read_bytes()).hexdigest(),
        *toolchain(board.cross_compile),
        *(f"recipe {p.name} " + hashlib.sha256(p.read_bytes()).hexdigest() for p in RECIPE_FILES),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def source_id(spec: BuildSpec, default: str) -> str:
    if spec.match is not None:      # the tree --match chose, with its version
        from rtforge.kernel.match import plan_source
        return prepare_source(plan_source(spec.match, get_board(spec.board), spec.source).spec).source_id
    return prepare_source(spec.source or default).source_id


def toolchain(cross: str) -> list[str]:
    """The compilers and binutils a build runs, by package version and own word."""
    out = []
    for tool in (f"{cross}gcc", f"{cross}ld", "gcc"):
        path = shutil.which(tool)
        if path is None:
            out.append(f"{tool} missing")
            continue
        real = os.path.realpath(path)
        version = subprocess.run([real, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
        owner = subprocess.run(["dpkg-query", "-S", real], capture_output=True, text=True).stdout.split(":")[0]
        package = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Version}", owner], capture_output=True,
                                 text=True).stdout if owner else ""
        out.append(f"{tool} {real} {version} {package}")
    return out


def _store(build: Path, kept: Path) -> None:
    t0 = time.monotonic()
    part = kept.with_name(kept.name + f".part-{os.getpid()}")
    excludes = [f"--exclude={p}" for p in NOT_KEPT]
    subprocess.run(["tar", "-I", "zstd -T0 -3", "-C", str(build), *excludes, "-cf", str(part), "."], check=True)
    part.rename(kept)
    say(f"kept the build tree as {kept.name} ({kept.stat().st_size >> 20} MiB, {time.monotonic() - t0:.0f} s)")
    cutoff = time.time() - KEEP_DAYS * 86400
    for old in kept.parent.glob("*.tar.zst"):
        if old != kept and old.stat().st_mtime < cutoff:
            old.unlink(missing_ok=True)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _locked(path: Path):
    """One build per build directory at a time (two pytest workers, two checkouts sharing a cache)."""
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
