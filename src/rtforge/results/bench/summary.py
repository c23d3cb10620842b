"""CPU benchmark runs (kind "bench", `rtforge bench cpu`): the raw results
as stored and the statistics derived from them (rawsteps.py reads them
from a run's raw/, stress-ng's metrics output included).

Stored in ``RunResult.bench`` -- raw values only, as for latency runs;
every median and spread is derived here when shown or compared:

  {"benchmark": "nqueens", "n": 12, "solutions_expected": 14200,
   "repeat": 5, "warmup": 1,
   "nqueens": [{"threads": 1, "solutions": 14200,
                "elapsed_ns": [...], "cpu_ns": [...],        one per repetition, in run order
                "warmup_elapsed_ns": [...]}, ...],           discarded solves, kept for the record
   "stress_ng": {"version": "0.15.06", "method": "matrixprod", "duration_s": 10,
                 "runs": [{"threads": 1, "bogo_ops": ..., "real_s": ..., "usr_s": ..., "sys_s": ...,
                           "bogo_ops_per_s": ..., "bogo_ops_per_cpu_s": ...}, ...]}
                 or None when stress-ng was skipped}
"""

from __future__ import annotations

import statistics
from typing import Any

from ..model import RunResult
from ..stats import run_header


def spread(values_ns: list[int]) -> dict[str, float | int | None]:
    """Median and spread of repeated solve times, in seconds.  Quartiles are
    numpy's default (linear interpolation between samples); stdev is the
    sample standard deviation (n - 1)."""
    import numpy as np  # here: every command's --help imports this module, and numpy is ~0.1 s of it

    v = np.asarray(values_ns, dtype=np.float64) / 1e9
    if v.size == 0:
        return {"count": 0, "median_s": None, "min_s": None, "max_s": None, "q1_s": None, "q3_s": None,
                "iqr_s": None, "stdev_s": None}
    q1, med, q3 = (float(x) for x in np.percentile(v, [25, 50, 75]))
    return {"count": int(v.size), "median_s": med, "min_s": float(v.min()), "max_s": float(v.max()),
            "q1_s": q1, "q3_s": q3, "iqr_s": q3 - q1, "stdev_s": float(v.std(ddof=1)) if v.size > 1 else None}


def summarize_bench(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per thread count: solutions, solve-time median and spread,
    CPUs busy (CPU time / wall time), and stress-ng's rate for as many workers."""
    stress = {r["threads"]: r for r in ((bench.get("stress_ng") or {}).get("runs") or [])}
    rows = []
    for entry in bench.get("nqueens") or []:
        elapsed, cpu = entry.get("elapsed_ns") or [], entry.get("cpu_ns") or []
        busy = [c / e for c, e in zip(cpu, elapsed) if e]
        s = stress.get(entry["threads"])
        rows.append({
            "threads": entry["threads"],
            "solutions": entry.get("solutions"),
            **spread(elapsed),
            "cpus_busy": statistics.median(busy) if busy else None,
            "stress_bogo_ops_per_s": s["bogo_ops_per_s"] if s else None,
        })
    return rows


def bench_show_dict(result: RunResult) -> dict[str, Any]:
    """What `rtforge show --json` prints for a bench run: stable keys."""
    bench = result.bench or {}
    stress = bench.get("stress_ng")
    return {
        **run_header(result),
        "board_model": result.system.get("board_model"),
        "n": bench.get("n"),
        "repeat": bench.get("repeat"),
        "threads": summarize_bench(bench),
        "stress_ng": {k: stress[k] for k in ("version", "method", "duration_s")} if stress else None,
        "bench": bench,
        "warnings": result.warnings,
        "reproducer": result.reproducer,
    }
