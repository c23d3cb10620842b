#!/usr/bin/env python3
"""The emulated Pi matrix: every Pi board's PREEMPT_RT kernel, built from
current mainline with its own defconfig plus rtforge's rt and latency
fragments, booted on each emulated Pi its board file names, with the probe
running inside.

    .venv/bin/python bench/pi_matrix.py [--boards pi1,pi4-64] [--sources debian:latest,debian:6.12]
                                       [--json matrix.json]

Sources: debian:latest (the newest linux-source Debian publishes) for every
board, and debian:6.12 (the LTS series Raspberry Pi OS follows) for the
arm64 boards; a board whose arch does not select ARCH_SUPPORTS_RT in a tree
is reported as such.  Full defconfig builds take tens of minutes each on
2 cores (hours for the matrix): run it outside CI, on a quiet machine.
Builds are incremental (an unchanged re-run compiles nothing) and ccache is
on, so the build time column is the time of this run; "objects" says how
much it compiled.

Prints one row per board x machine x source: build time, objects, booted,
PREEMPT_RT in `uname -v`, the page size the guest's user space got (the
boot test holds it to the bundle's .config: 16K for pi5), probe samples.
Inside TCG the probe's latencies are emulation noise: the matrix shows that
it runs, not how fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from rtforge.device.deploy.bundle import open_bundle
from rtforge.errors import UserError
from rtforge.kernel.boards import load_boards
from rtforge.kernel.boottest import boot_test
from rtforge.kernel.build import BuildSpec, build_kernel
from rtforge.kernel.kbuild import ccache_counts
from rtforge.results.store.runstore import Store

DEFAULT_SOURCES = ("debian:latest", "debian:6.12")


def pi_boards() -> list:
    """The Pi rows of the board files (mainline-arm64 shares pi4-64's mainline defconfig)."""
    return [b for b in load_boards().values() if b.models and b.name != "mainline-arm64"]


def sources_for(board, sources: list[str]) -> list[str]:
    return [s for s in sources if s == "debian:latest" or board.arch == "arm64"]


def run(boards: list, sources: list[str], dist: Path, store: Store, probe_s: int, timeout_s: int,
        keep=lambda rows: None) -> list[dict]:
    """Build and boot each board x source; `keep(rows)` is called after each one so a
    matrix cut off after hours still has what it proved."""
    rows = []
    for board in boards:
        for source in sources_for(board, sources):
            print(f"== {board.name} from {source}", flush=True)
            # a board whose .config another built before (pi5 after pi4-64) compiles from
            # ccache: its build time says little without the share of hits
            t, (hits0, misses0) = time.monotonic(), ccache_counts()
            try:
                built = build_kernel(BuildSpec(board=board.name, source=source, dist=dist, debs=False),
                                     progress=_progress(board.name))
            except UserError as e:
                rows.append({"board": board.name, "source": source, "machine": "-", "error": str(e),
                             "build_s": round(time.monotonic() - t)})
                print(f"   build failed: {e}", flush=True)
                keep(rows)
                continue
            build_s = time.monotonic() - t
            hits1, misses1 = ccache_counts()
            cache = {"ccache_hits": hits1 - hits0, "ccache_misses": misses1 - misses0}
            print(f"   built {built.release} in {build_s / 60:.1f} min ({built.objects} objects, "
                  f"ccache {cache['ccache_hits']} hits / {cache['ccache_misses']} misses)", flush=True)
            bundle = open_bundle(built.dist)
            try:
                results = boot_test(bundle, store, timeout_s=timeout_s, probe_s=probe_s)
            finally:
                bundle.close()
            for r in results:
                samples = 0
                if r.run_id:
                    samples = sum(c.count for c in store.load(r.run_id).cpus)
                rows.append({"board": board.name, "source": source, "release": built.release,
                             "machine": r.machine + (" (stand-in)" if r.stand_in else ""),
                             "build_s": round(build_s), "objects": built.objects, **cache,
                             "booted": r.uname_v is not None,
                             "preempt_rt": bool(r.uname_v and "PREEMPT_RT" in r.uname_v.split()),
                             "probe_samples": samples, "passed": r.passed, "boot_s": round(r.seconds),
                             "page_size": r.page_size,
                             "sentence": r.sentence, "console_log": str(r.console_log)})
                print(f"   {r.machine}: {'passed' if r.passed else 'FAILED'}: {r.sentence}", flush=True)
            keep(rows)
    return rows


def merged(path: Path, rows: list[dict], date: str) -> dict:
    """The matrix file with this run's rows in place of earlier ones for the same
    board x source x machine: the matrix takes days to fill, one run at a time."""
    old = json.loads(path.read_text()) if path.exists() else {"rows": []}
    key = lambda r: (r["board"], r["source"], r["machine"])  # noqa: E731
    new = {key(r) for r in rows}
    # a failed build has machine "-": a later row for that board x source replaces it too
    done = {(r["board"], r["source"]) for r in rows}
    kept = [r for r in old["rows"]
            if key(r) not in new and not (r["machine"] == "-" and (r["board"], r["source"]) in done)]
    for r in rows:
        r.setdefault("date", date)
    return {"date": date, "rows": kept + rows}


def _progress(name: str):
    last = [0.0, ""]

    def show(what: str, done, total) -> None:
        # a line per step, and within a step (compiling, extracting) one a minute
        if time.monotonic() - last[0] > 60 or what != last[1]:
            last[:] = [time.monotonic(), what]
            count = f" {done}/{total}" if done is not None and total else ""
            print(f"   [{name}] {what}{count}", flush=True)
    return show


def _hits(row: dict) -> str:
    calls = row.get("ccache_hits", 0) + row.get("ccache_misses", 0)
    return f" ({row['ccache_hits'] / calls:.0%})" if calls else ""


def table(rows: list[dict]) -> str:
    head = (
        "| board | machine | source | release | build | objects (ccache hits) | boots | PREEMPT_RT in uname -v "
        "| pages | probe samples |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['board']} | - | {r['source']} | - | failed: {r['error'][:80]} | | | | | |")
            continue
        pages = f"{r['page_size'] // 1024}K" if r.get("page_size") else "?"   # rows from before the column: ?
        lines.append(
            f"| {r['board']} | {r['machine']} | {r['source']} | {r['release']} | {r['build_s'] / 60:.1f} min "
            f"| {r['objects']}{_hits(r)} | {'yes' if r['booted'] else 'no'} ({r['boot_s']} s) "
            f"| {'yes' if r['preempt_rt'] else 'no'} | {pages} | {r['probe_samples']} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boards", help="comma-separated board names (default: every Pi board)")
    ap.add_argument("--sources", default=",".join(DEFAULT_SOURCES))
    ap.add_argument("--dist", type=Path, default=Path("dist/matrix"))
    ap.add_argument("--results-dir", type=Path, default=None, help="run store for the probe runs (default: rtforge's)")
    ap.add_argument("--probe-s", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per boot")
    ap.add_argument("--json", type=Path, help="keep the rows in this JSON file, merged with its earlier rows")
    args = ap.parse_args()
    boards = pi_boards()
    if args.boards:
        every = load_boards()
        boards = [every[name] for name in args.boards.split(",")]  # in the order given
    started = datetime.now(UTC)
    date = started.isoformat(timespec="seconds")

    def keep(rows: list[dict]) -> None:
        if args.json:
            args.json.write_text(json.dumps(merged(args.json, rows, date), indent=1))

    try:
        rows = run(boards, args.sources.split(","), args.dist, Store(args.results_dir), args.probe_s, args.timeout,
                   keep)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        return 1
    print(f"\nEmulated Pi matrix, {started:%Y-%m-%d} (`python bench/pi_matrix.py`, {len(rows)} rows):\n")
    print(table(rows))
    keep(rows)
    if args.json:
        print(f"\nevery row so far ({args.json}):\n")
        print(table(json.loads(args.json.read_text())["rows"]))
    return 0 if all(r.get("passed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
