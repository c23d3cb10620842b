#!/usr/bin/env python3
"""The soak monitor's history at the size a fleet reaches: a board's
monitor folder synthesized in the probe's own on-disk format (docs/
monitoring.md: windows, hours, days, events, state; 4 CPUs, 5-minute
windows, a 1 ms interval, three kernels), then, as a user does it, each as
its own rtforge process:

    monitor fetch (into an empty store)   the first fetch of the history
    monitor fetch (nothing new)           what a nightly job pays, once the
                                          board has rotated its folder as
                                          the monitor does (windows kept 14
                                          days, hours 13 months)
    trend --json                          the verdict over the whole span
    trend -o trend.png                    the picture

Printed per size: wall time and peak memory (the process's max RSS), and
the growth from the size before: a cost that follows the history grows
with it; one that follows what is new does not.

    .venv/bin/python bench/monitor_scale.py [--sizes 7,30,182] [--cpus 4] [--boards N] [--keep DIR]

With --boards N, the largest size is measured again in a store holding N
boards of that history: one board's fetch and trend beside the others, and
one `trend --json` over all N (the other boards are the first one's fetched
data copied under other names: what is measured is the store, not N
synthesized boards).

The synthesized folders are cached under --keep (default: a temporary
folder, removed at the end).  Goals (issue 34): at 6 months, fetch with
nothing new ≤ 2 s and ≤ 300 MB; the first fetch ≤ 60 s and ≤ 500 MB;
trend ≤ 3 s and ≤ 300 MB; at a year and 20 boards, the same per board.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rtforge.results.soak.windows import bucket_index, encode_runs, parse_window, roll  # noqa: E402

S = 1_000_000_000
WINDOW_S = 300
INTERVAL_NS = 1_000_000
START = datetime(2026, 1, 1, tzinfo=UTC)


def _cpu_templates(rng: random.Random, n: int = 64) -> list[list[tuple[int, int]]]:
    """Histograms as a Pi's soak windows look: most wake-ups at 8-20 µs, a
    tail to tens of µs, now and then a spike; (bucket, count) pairs summing
    to a window's wake-ups on one CPU (300,000 at 1 ms over 5 minutes)."""
    total = WINDOW_S * S // INTERVAL_NS
    out = []
    for _ in range(n):
        tail = rng.choice([40_000, 60_000, 90_000, 150_000])
        values = [int(rng.lognormvariate(9.4, 0.35)) for _ in range(400)] + \
                 [rng.randint(20_000, tail) for _ in range(40)]
        buckets: dict[int, int] = {}
        for v in values:
            buckets[bucket_index(v)] = buckets.get(bucket_index(v), 0) + 1
        scale = total / sum(buckets.values())
        pairs = [(i, max(1, int(c * scale))) for i, c in sorted(buckets.items())]
        fix = total - sum(c for _, c in pairs)
        i0, c0 = max(pairs, key=lambda p: p[1])
        pairs[pairs.index((i0, c0))] = (i0, c0 + fix)
        out.append(pairs)
    return out


def _cpu(cpu: int, pairs: list[tuple[int, int]]) -> dict:
    from rtforge.results.soak.windows import bucket_hi, bucket_lo
    count = sum(c for _, c in pairs)
    lo, hi = bucket_lo(pairs[0][0]), bucket_hi(pairs[-1][0])
    mid = sum((bucket_lo(i) + bucket_hi(i)) // 2 * c for i, c in pairs)
    return {"cpu": cpu, "count": count, "min_ns": lo, "max_ns": hi, "sum_ns": mid, "overruns": 0,
            "spikes": sum(c for i, c in pairs if bucket_lo(i) > INTERVAL_NS // 2), "h": encode_runs(dict(pairs))}


def _rollup_dict(r) -> dict:
    return {r.kind: r.key, "life": r.lives[0], "host": "pi-soak", "kernel": r.kernels[0][0], "kver": r.kernels[0][1],
            "start_ns": r.start_ns, "end_ns": r.end_ns, "windows": r.windows, "partial_windows": r.partial_windows,
            "covered_ns": r.covered_ns, "alerts": r.alerts, "spikes": r.spikes, "temp_max_mc": r.temp_max_mc,
            "throttled": r.throttled, "cpus": [{k: v for k, v in c.to_dict().items() if k != "spikes"}
                                               for c in r.cpus]}


def synthesize(folder: Path, days: int, cpus: int, seed: int = 1) -> int:
    """A board's monitor folder of `days` days; returns its windows."""
    rng = random.Random(seed)
    templates = _cpu_templates(rng)
    kernels = [("6.12.47+rpt-rpi-v8", "#1 SMP PREEMPT Debian 1:6.12.47-1+rpt1"),
               ("6.12.47-rt12-rtforge", "#1 SMP PREEMPT_RT rtforge"),
               ("6.12.57-rt14-rtforge", "#1 SMP PREEMPT_RT rtforge")]
    per_kernel = max(1, days // len(kernels) + 1)
    (folder / "windows").mkdir(parents=True)
    (folder / "hours").mkdir()
    (folder / "days").mkdir()
    events, n_windows, t0 = [], 0, int(START.timestamp())
    hours_by_month: dict[str, list[str]] = {}
    days_lines: list[str] = []
    for d in range(days):
        k = min(d // per_kernel, len(kernels) - 1)
        life = f"{k:08x}-{t0 + per_kernel * k * 86400}"
        if d == 0 or d // per_kernel != (d - 1) // per_kernel:
            start_s = t0 + d * 86400
            events.append({"event": "start", "t_ns": start_s * S, "life": life})
            if d:
                events.append({"event": "gap", "t_ns": start_s * S, "life": life, "life_before": f"{k - 1:08x}",
                               "from_ns": (start_s - 60) * S, "to_ns": start_s * S, "seconds": 60, "reboot": True,
                               "clean": True})
                events.append({"event": "kernel", "t_ns": start_s * S, "life": life, "from": kernels[k - 1][0],
                               "to": kernels[k][0]})
        day_windows, lines = [], []
        for i in range(86400 // WINDOW_S):
            start = t0 + d * 86400 + i * WINDOW_S
            n = (d % per_kernel) * 288 + i
            w = {"v": 1, "life": life, "n": n, "start_ns": start * S, "end_ns": (start + WINDOW_S) * S,
                 "partial": False, "host": "pi-soak", "kernel": kernels[k][0], "kver": kernels[k][1],
                 "interval_ns": INTERVAL_NS, "window_s": WINDOW_S,
                 "cpus": [_cpu(c, rng.choice(templates)) for c in range(cpus)], "spikes": 0, "lost_windows": 0,
                 "tel": {"samples": WINDOW_S, "temp_max_mc": [rng.randint(48000, 62000)], "temp_min_mc": [47000],
                         "throttled": 0, "load1_max": 3.1, "irq_per_s": [1000.0] * cpus},
                 "alert": None}
            lines.append(json.dumps(w, separators=(",", ":")))
            day_windows.append(parse_window(json.loads(lines[-1])))
            n_windows += 1
        day = (START.date().toordinal() + d)
        name = datetime.fromordinal(day).strftime("%Y-%m-%d")
        (folder / "windows" / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        for r in roll(day_windows, "hour"):
            hours_by_month.setdefault(name[:7], []).append(json.dumps(_rollup_dict(r), separators=(",", ":")))
        days_lines += [json.dumps(_rollup_dict(r), separators=(",", ":")) for r in roll(day_windows, "day")]
    for month, lines in hours_by_month.items():
        (folder / "hours" / f"{month}.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "days" / f"{START.year}.jsonl").write_text("\n".join(days_lines) + "\n")
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    last_end = (t0 + days * 86400) * S
    (folder / "state").write_text(f"host pi-soak\npid 1\nboot {'0' * 8}\nkernel {kernels[-1][0]}\n"
                                  f"last_end_ns {last_end}\nrunning 0\n")
    return n_windows


def rotate(folder: Path, keep_days: int = 14, keep_months: int = 13) -> None:
    """What the monitor's rotation leaves on the board (docs/monitoring.md,
    "Bounded storage"): the last keep_days of windows, 13 months of hours,
    every day; the store keeps what it fetched before."""
    for sub, keep in (("windows", keep_days), ("hours", keep_months)):
        for f in sorted((folder / sub).glob("*.jsonl"))[:-keep]:
            f.unlink()


def run(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one rtforge process."""
    t = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "rtforge", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"rtforge {' '.join(argv)} failed: {err.strip()[-400:]}")
    return wall, usage.ru_maxrss / 1024


def many_boards(base: Path, days: int, cpus: int, boards: int, alone: dict[str, tuple[float, float]]) -> None:
    """One board's costs again in a store of `boards` boards, and one trend over all."""
    board, store = base / f"board-{days}d-{cpus}cpu-rotated", base / f"store-{days}d"
    first = store / "monitor" / "pi-soak"
    names = ["pi-soak"] + [f"pi-soak-{i:02d}" for i in range(2, boards + 1)]
    for name in names[1:]:   # links, not copies: 20 boards of a year are 12 GB, and nothing here writes them
        shutil.rmtree(store / "monitor" / name, ignore_errors=True)
        shutil.copytree(first, store / "monitor" / name, copy_function=os.link)
    rd = ["--results-dir", str(store)]
    beside = {"fetch, nothing new": run(["monitor", "fetch", "--state-dir", str(board), *rd]),
              "trend --json": run(["trend", "pi-soak", "--json", *rd])}
    every = run(["trend", *names, "--json", *rd])
    print(f"\n{days} days, one board of {boards} in the store (alone -> beside {boards - 1} others):")
    for o, (w, m) in beside.items():
        print(f"  {o:20} {alone[o][0]:.2f} s {alone[o][1]:,.0f} MB -> {w:.2f} s {m:,.0f} MB")
    w1, m1 = alone["trend --json"]
    print(f"  trend --json over all {boards}: {every[0]:.2f} s {every[1]:,.0f} MB "
          f"({every[0] / boards:.2f} s per board; one alone {w1:.2f} s {m1:,.0f} MB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="7,30,182", help="days of history, comma-separated (default 7,30,182)")
    ap.add_argument("--cpus", type=int, default=4)
    ap.add_argument("--boards", type=int, default=1, help="at the largest size, a store of this many boards too")
    ap.add_argument("--keep", type=Path, help="keep the synthesized folders here (reused when present)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = args.keep or Path(tempfile.mkdtemp(prefix="rtforge-monitor-scale-"))
    ops = ("fetch, empty store", "fetch, nothing new", "trend --json", "trend -o png")
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    try:
        for days in sizes:
            board = base / f"board-{days}d-{args.cpus}cpu"
            if not (board / "state").exists():
                shutil.rmtree(board, ignore_errors=True)
                t = time.monotonic()
                n = synthesize(board, days, args.cpus)
                print(f"synthesized {days} days: {n:,} windows, "
                      f"{sum(f.stat().st_size for f in board.rglob('*') if f.is_file()) / 2**20:,.0f} MiB "
                      f"in {time.monotonic() - t:.0f} s", flush=True)
            store = base / f"store-{days}d"
            shutil.rmtree(store, ignore_errors=True)
            rd = ["--results-dir", str(store)]
            rows[days] = {}
            rows[days][ops[0]] = run(["monitor", "fetch", "--state-dir", str(board), *rd])
            rotated = base / f"board-{days}d-{args.cpus}cpu-rotated"
            shutil.rmtree(rotated, ignore_errors=True)
            shutil.copytree(board, rotated, copy_function=os.link)
            rotate(rotated)
            rows[days][ops[1]] = run(["monitor", "fetch", "--state-dir", str(rotated), *rd])
            rows[days][ops[2]] = run(["trend", "pi-soak", "--json", *rd])
            rows[days][ops[3]] = run(["trend", "pi-soak", "-o", str(base / f"trend-{days}d.png"), *rd])
            print(f"{days} days: " + ", ".join(f"{o} {w:.1f} s {m:,.0f} MB" for o, (w, m) in rows[days].items()),
                  flush=True)
        print(f"\n{'':20}" + "".join(f"{f'{d} days':>22}" for d in sizes) + "   growth (last/first)")
        for o in ops:
            cells = "".join(f"{f'{rows[d][o][0]:.2f} s {rows[d][o][1]:,.0f} MB':>22}" for d in sizes)
            first, last = rows[sizes[0]][o], rows[sizes[-1]][o]
            print(f"{o:20}{cells}   x{last[0] / first[0]:.1f} time, x{last[1] / first[1]:.1f} memory")
        print(f"\nhistory grew x{sizes[-1] / sizes[0]:.0f}; {datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} CPUs")
        if args.boards > 1:
            many_boards(base, sizes[-1], args.cpus, args.boards, rows[sizes[-1]])
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
