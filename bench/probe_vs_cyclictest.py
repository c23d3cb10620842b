#!/usr/bin/env python3
"""Probe vs cyclictest, side by side in one run.

Same interval, priority, CPUs and duration; the two alternate for N rounds
each so that drift in the machine's state hits both alike.  Prints, per
engine, the median over rounds of min, p99 and max latency (all CPUs as one
population) and of CPU time per wake-up, then the ratios probe/cyclictest.

cyclictest measures in whole microseconds (truncated); the probe's values are
truncated the same way here so the ratios compare like with like.

    .venv/bin/python bench/probe_vs_cyclictest.py [--rounds 5] [--seconds 10]

Needs root (SCHED_FIFO).  Goal: latency ratios within 0.9-1.1, CPU ratio <= 1.0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rtforge.measure.probebuild import build_probe
from rtforge.measure.spec import format_cpu_list
from rtforge.results.cyclictest import cpus_from_json
from rtforge.results.model import RunResult
from rtforge.results.probe_output import cpus_from_probe, read_probe_json
from rtforge.results.stats import summarize_all


def timed(argv: list[str]) -> float:
    """Run argv; return the CPU time (user + system) it and its children used."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.read().decode().strip()}")
    return usage.ru_utime + usage.ru_stime


def summary(cpus) -> dict:
    s = summarize_all(RunResult(run_id="b", engine="b", state="complete", host="", start_time="", cpus=cpus))
    return {"min_us": s.min_ns // 1000, "p99_us": s.p99_ns // 1000, "max_us": s.max_ns // 1000, "wakeups": s.count}


def run_probe(probe: Path, a, cpus: list[int], tmp: Path) -> dict:
    out = tmp / "probe"
    cpu_s = timed([str(probe), "--out", str(out), "--interval-us", str(a.interval_us), "--priority",
                   str(a.priority), "--cpus", format_cpu_list(cpus), "--duration-s", str(a.seconds)])
    s = summary(cpus_from_probe(read_probe_json(out)))
    return {**s, "cpu_ns_per_wakeup": cpu_s * 1e9 / s["wakeups"]}


def run_cyclictest(a, cpus: list[int], tmp: Path) -> dict:
    js = tmp / "ct.json"
    hist_us = max(1000, 10 * a.interval_us)
    cpu_s = timed(["cyclictest", "--mlockall", f"--priority={a.priority}", "--policy=fifo",
                   f"--interval={a.interval_us}", "--distance=0", f"--threads={len(cpus)}",
                   f"--affinity={format_cpu_list(cpus)}", f"--histogram={hist_us}", "--quiet",
                   f"--json={js}", f"--duration={a.seconds}"])
    s = summary(cpus_from_json(json.loads(js.read_text()), hist_us))
    return {**s, "cpu_ns_per_wakeup": cpu_s * 1e9 / s["wakeups"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--interval-us", type=int, default=200)
    ap.add_argument("--priority", type=int, default=90)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: both engines need SCHED_FIFO")
    probe = build_probe()
    cpus = sorted(os.sched_getaffinity(0))
    res: dict[str, list[dict]] = {"probe": [], "cyclictest": []}
    print(f"interval {a.interval_us} µs, priority {a.priority}, CPUs {format_cpu_list(cpus)}, "
          f"{a.rounds} rounds × {a.seconds} s per engine, alternating", flush=True)
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.rounds):
            for engine in ("probe", "cyclictest") if i % 2 == 0 else ("cyclictest", "probe"):
                r = run_probe(probe, a, cpus, Path(d)) if engine == "probe" else run_cyclictest(a, cpus, Path(d))
                res[engine].append(r)
                print(f"  round {i + 1} {engine:10} min {r['min_us']:4} µs  p99 {r['p99_us']:5} µs  "
                      f"max {r['max_us']:6} µs  cpu {r['cpu_ns_per_wakeup']:7.0f} ns/wake-up", flush=True)
    med = {e: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for e, rs in res.items()}
    print("\nmedians            probe   cyclictest   probe/cyclictest")
    for key, unit in (("min_us", "µs"), ("p99_us", "µs"), ("max_us", "µs"), ("cpu_ns_per_wakeup", "ns")):
        p, c = med["probe"][key], med["cyclictest"][key]
        ratio = p / c if c else float("nan")
        print(f"  {key:18} {p:8.1f} {c:10.1f} {unit}   {ratio:6.2f}")


if __name__ == "__main__":
    main()
