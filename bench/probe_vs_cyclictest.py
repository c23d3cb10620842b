#!/usr/bin/env python3
"""Probe vs cyclictest, measured the way rtforge measures: paired rounds.

Each round runs three measurements back to back through rtforge's own
lifecycle (`run_latency`, the runner, this machine): the probe with its
default phase (`together`: each CPU's thread starts its period as it
starts, as cyclictest's threads do), the probe with `--phase spread`, and
the real cyclictest -- same interval, priority, CPUs and duration, in an
order that rotates from round to round so drift in the machine's state
hits all three alike.  Per round it takes, all CPUs as one population:
min, p99, p99.9 and max latency (the probe's values truncated to whole µs
like cyclictest's) and the engine's CPU time per wake-up (the runner's
`times` around the engine; cyclictest's telemetry probe is not counted).

Each probe/cyclictest ratio is the geometric mean of the per-round ratios,
with a 95 % confidence interval from a bootstrap over the paired rounds
(numpy).  Goal: every latency ratio's interval inside 0.9-1.1, CPU time
per wake-up <= 1.0x.

    .venv/bin/python bench/probe_vs_cyclictest.py [--rounds 30] [--seconds 5] [--json out.json]

Needs root (SCHED_FIFO).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rtforge.measure.session import run_latency
from rtforge.measure.spec import LatencySpec
from rtforge.results.raw.finalize import engine_cpu_s
from rtforge.results.stats import summarize_all
from rtforge.results.store.runstore import Store

MODES = {"together": ("probe", "together"), "spread": ("probe", "spread"), "cyclictest": ("cyclictest", "together")}
METRICS = (("min_us", "min"), ("p99_us", "p99"), ("p999_us", "p99.9"), ("max_us", "max"),
           ("cpu_ns_per_wakeup", "CPU time per wake-up"))


def measure(mode: str, a, store: Store) -> dict:
    engine, phase = MODES[mode]
    spec = LatencySpec(duration_s=a.seconds, interval_us=a.interval_us, priority=a.priority, engine=engine,
                       phase=phase, histogram_us=a.histogram_us)
    result = run_latency(spec, store)
    if result.state != "complete":
        sys.exit(f"{mode}: the run ended {result.state} ({result.end_reason})")
    s = summarize_all(result)
    cpu_s = engine_cpu_s(store.run_dir(result.run_id))
    store.delete(result.run_id)

    def us(ns):  # None: beyond cyclictest's histogram (that round then counts for the other figures only)
        return None if ns is None else ns // 1000

    return {"min_us": us(s.min_ns), "p99_us": us(s.p99_ns), "p999_us": us(s.p999_ns), "max_us": us(s.max_ns),
            "wakeups": s.count, "cpu_ns_per_wakeup": cpu_s * 1e9 / s.count}


def geo_ci(ratios: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """Geometric mean of paired ratios and its 95 % bootstrap interval."""
    logs = np.log(ratios)
    idx = rng.integers(0, len(logs), size=(resamples, len(logs)))
    boot = logs[idx].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(np.exp(logs.mean())), float(np.exp(lo)), float(np.exp(hi))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--interval-us", type=int, default=200)
    ap.add_argument("--priority", type=int, default=90)
    ap.add_argument("--histogram-us", type=int, default=10_000,
                    help="cyclictest -h: wide, so a loaded round keeps its p99.9")
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--json", type=Path, help="write every round's figures here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: both engines need SCHED_FIFO")
    rows: dict[str, list[dict]] = {m: [] for m in MODES}
    loads: list[float] = []
    print(f"interval {a.interval_us} µs, priority {a.priority}, all CPUs, {a.rounds} rounds × 3 runs × "
          f"{a.seconds} s, order rotating; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rtforge-bench-") as tmp:
        store = Store(Path(tmp) / "results")
        order = list(MODES)
        for r in range(a.rounds):
            for mode in order[r % 3:] + order[:r % 3]:
                rows[mode].append(measure(mode, a, store))
            loads.append(os.getloadavg()[0])
            line = "  ".join(f"{m} p99 {rows[m][-1]['p99_us']} max {rows[m][-1]['max_us']} "
                             f"cpu {rows[m][-1]['cpu_ns_per_wakeup']:6.0f} ns" for m in MODES)
            print(f"round {r + 1:3}: {line}  (load {loads[-1]:.1f})", flush=True)
            if a.json:  # kept as it goes: a long bench stopped early still says what it saw
                a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows,
                                              "load": loads}, indent=1))
    rng = np.random.default_rng(1)
    print(f"\n{a.rounds} paired rounds in {(time.monotonic() - t0) / 60:.1f} min; load average "
          f"{min(loads):.1f}-{max(loads):.1f} (median {float(np.median(loads)):.1f})")
    print("geometric mean of per-round ratios to cyclictest, [95 % bootstrap interval]")
    print(f"{'':22}{'together/cyclictest':>30}{'spread/cyclictest':>30}")
    summary = {}
    for key, name in METRICS:
        ct = np.array([row[key] or 0 for row in rows["cyclictest"]], dtype=float)
        cells = []
        for mode in ("together", "spread"):
            v = np.array([row[key] or 0 for row in rows[mode]], dtype=float)
            ok = (ct > 0) & (v > 0)
            g, lo, hi = geo_ci(v[ok] / ct[ok], a.resamples, rng)
            summary[f"{mode}/{key}"] = (g, lo, hi)
            cells.append(f"{g:.3f} [{lo:.3f}, {hi:.3f}]")
        medians = "  ".join(f"{m} {np.median([row[key] for row in rows[m] if row[key]]):.0f}" for m in MODES)
        print(f"{name:22}{cells[0]:>30}{cells[1]:>30}   medians: {medians}")
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows, "load": loads,
                                      "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
