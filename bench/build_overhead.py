#!/usr/bin/env python3
"""What rtforge adds to a kernel build: rtforge kernel build vs bare make.

Both build the same configuration of the same tree (Debian's 6.12 source,
board qemu-virt-arm64 by default) from an empty build directory with ccache
disabled (cold), then once more with nothing changed (no-op).  The bare side
runs exactly the make commands rtforge runs, on rtforge's .config:

    make O=<dir> ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- olddefconfig
    make O=<dir> ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- -j<cpus> Image [modules] [dtbs]

rtforge's side is `rtforge kernel build --no-debs` (configure, read back,
build, package the bundle), timed as a whole.

    .venv/bin/python bench/build_overhead.py [--board qemu-virt-arm64] [--source debian:6.12]

The tree is read once before timing, so that neither side pays for the
first read from disk.  Goal: cold ratio <= 1.03, no-op rtforge build < 30 s.  A cold build takes
minutes: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rtforge.kernel.boards import get_board
from rtforge.kernel.fetch import kernel_cache
from rtforge.kernel.sources import prepare_source


def timed(argv: list[str], env: dict) -> float:
    t = time.monotonic()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(argv[:4])} failed: {r.stderr.strip()[-400:]}")
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default="qemu-virt-arm64")
    ap.add_argument("--source", default="debian:6.12")
    a = ap.parse_args()
    board = get_board(a.board)
    env = {**os.environ, "CCACHE_DISABLE": "1"}  # cold means cold
    rtforge = [str(Path(sys.executable).with_name("rtforge")), "kernel", "build", "--board", a.board,
               "--source", a.source, "--no-debs"]
    jobs = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="rtforge-bench-") as d:
        # A cache of its own: the cold build must not reuse (or wipe) the
        # build directories and ccache that the tests keep warm.
        os.environ["RTFORGE_CACHE_DIR"] = env["RTFORGE_CACHE_DIR"] = str(Path(d) / "cache")
        source = prepare_source(a.source)
        tree = source.path
        build_root = kernel_cache() / "build" / f"{tree.name}-{board.name}"
        dist, bare = Path(d) / "dist", Path(d) / "bare"
        print(f"{board.name} from {a.source}, -j{jobs}, ccache disabled; cold builds take minutes", flush=True)
        # Whoever builds first would read the tree from disk and the second
        # from the page cache: read it all once, untimed.
        for f in tree.rglob("*"):
            if f.is_file() and not f.is_symlink():
                f.read_bytes()
        cold_rtforge = timed(rtforge + ["--dist", str(dist)], env)
        print(f"  rtforge cold  {cold_rtforge:7.1f} s", flush=True)
        bare.mkdir()
        shutil.copy2(build_root / "obj" / ".config", bare / ".config")
        base = ["make", "-C", str(tree), f"O={bare}", f"ARCH={board.arch}", f"CROSS_COMPILE={board.cross_compile}"]
        lv = "LOCALVERSION=-rt-rtforge"
        # the targets rtforge builds for this board and configuration
        targets = [board.image_target]
        if "CONFIG_MODULES=y" in (bare / ".config").read_text().splitlines():
            targets.append("modules")
        if board.dtbs.get(source.flavour):
            targets.append("dtbs")
        cold_bare = timed(base + ["olddefconfig"], env) + timed(base + [f"-j{jobs}", lv, *targets], env)
        print(f"  bare make cold {cold_bare:7.1f} s", flush=True)
        noop_rtforge = timed(rtforge + ["--dist", str(dist)], env)
        noop_bare = timed(base + ["olddefconfig"], env) + timed(base + [f"-j{jobs}", lv, *targets], env)
        print(f"  rtforge no-op {noop_rtforge:7.1f} s   bare make no-op {noop_bare:5.1f} s", flush=True)
    print("\n                 rtforge   bare make   rtforge/bare")
    print(f"  cold build   {cold_rtforge:8.1f} s {cold_bare:9.1f} s   {cold_rtforge / cold_bare:8.3f}  (goal <= 1.03)")
    print(f"  no-op build  {noop_rtforge:8.1f} s {noop_bare:9.1f} s   {noop_rtforge / noop_bare:8.2f}  "
          f"(goal: rtforge < 30 s: {'met' if noop_rtforge < 30 else 'NOT met'})")


if __name__ == "__main__":
    main()
