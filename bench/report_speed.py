#!/usr/bin/env python3
"""How fast a long run is summarised and plotted.

A synthetic 100-million-cycle, 4-CPU probe run with a 24-hour per-second
series and telemetry is stored, then timed: load from the store, summary
(`show --json`), and every plot of its report as SVG.  The histogram comes
from the real probe (`rtprobe --hist-stdin` on a million samples, counts
scaled to 100 M), so its buckets are the ones a real run has.

    .venv/bin/python bench/report_speed.py [--repeat 3]

Goal: summary + all plots under 2 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from rtforge.measure.probebuild import build_probe
from rtforge.report import document, plots
from rtforge.results.hist import Histogram
from rtforge.results.model import CpuResult, RunResult
from rtforge.results.stats import show_dict
from rtforge.results.store.runstore import Store

CPUS, CYCLES, SECONDS = 4, 100_000_000, 24 * 3600


def synthetic_run(store: Store) -> str:
    rng = np.random.default_rng(1)
    probe = build_probe()
    cpus = []
    for cpu in range(CPUS):
        # a body around 20 µs and a long tail, as a loaded RT kernel shows
        body = rng.lognormal(np.log(20_000), 0.25, 990_000)
        tail = rng.pareto(2.5, 10_000) * 30_000 + 40_000
        values = np.concatenate([body, tail]).astype(np.int64)
        doc = json.loads(subprocess.run([str(probe), "--hist-stdin"], input="\n".join(map(str, values)),
                                        capture_output=True, text=True, check=True).stdout)
        scale = CYCLES // CPUS // doc["count"]
        buckets = [[lo, hi, n * scale] for lo, hi, n in doc["buckets"]]
        count = sum(b[2] for b in buckets)
        cpus.append(CpuResult(cpu=cpu, count=count, min_ns=doc["min_ns"], max_ns=doc["max_ns"],
                              sum_ns=doc["sum_ns"] * scale, overruns=0, hist=Histogram.from_buckets(buckets)))
    t = list(range(SECONDS))
    per_s = CYCLES // CPUS // SECONDS
    series = {"t_s": t, "cpus": list(range(CPUS)), "count": [[per_s] * SECONDS for _ in range(CPUS)],
              "max_ns": [rng.lognormal(np.log(35_000), 0.3, SECONDS).astype(int).tolist() for _ in range(CPUS)],
              "overruns": [[0] * SECONDS for _ in range(CPUS)]}
    temp = (55_000 + 10_000 * np.sin(np.arange(SECONDS) / 3600)).astype(int).tolist()
    telemetry = {"t_s": [float(x) for x in t], "temp_mc": {"zone0 cpu-thermal": temp},
                 "freq_khz": {f"cpu{c}": [1_500_000] * SECONDS for c in range(CPUS)},
                 "throttled": [0] * SECONDS, "load1": [4.0] * SECONDS}
    run = RunResult(run_id=store.new_run_id("bench"), engine="probe", state="complete", host="bench",
                    start_time="2026-01-01T00:00:00+00:00", label="synthetic 24 h", duration_s=SECONDS,
                    config={"interval_us": 864, "priority": 90, "cpus": list(range(CPUS)), "loads": ["cpu"]},
                    system={"kernel_release": "6.12.0-rt", "preempt_model": "rt"}, cpus=cpus, series=series,
                    telemetry=telemetry)
    store.save(run)
    return run.run_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d))
        run_id = synthetic_run(store)
        size = (store.run_dir(run_id) / "result.json").stat().st_size
        print(f"synthetic run: {CPUS} CPUs, {CYCLES:,} cycles, {SECONDS:,} s series, result.json {size / 1e6:.1f} MB")
        times: dict[str, list[float]] = {"load": [], "summary": [], "plots": []}
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            run = store.load(run_id)
            t1 = time.perf_counter()
            show_dict(run)
            t2 = time.perf_counter()
            for _stem, _caption, fig in document.figures([run]):
                plots.render(fig, "svg")
            t3 = time.perf_counter()
            times["load"].append(t1 - t0)
            times["summary"].append(t2 - t1)
            times["plots"].append(t3 - t2)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"  {k:8} {v:6.2f} s (median of {a.repeat})")
    total = med["summary"] + med["plots"]
    print(f"summary + all plots: {total:.2f} s (goal < 2 s){'' if total < 2 else '  -- OVER GOAL'}")
    print(f"with loading the run: {total + med['load']:.2f} s")


if __name__ == "__main__":
    main()
