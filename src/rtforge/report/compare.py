"""Runs side by side, with ratios to the first run: latency runs ("max 3.2×
lower") and CPU benchmark runs ("RT is 1.11× slower multi-thread")."""

from __future__ import annotations

from typing import Any

from ..errors import UserError
from ..results.bench.summary import summarize_bench
from ..results.display import loads_text
from ..results.model import RunResult
from ..results.stats import percentile_text, summarize_all
from ..units import format_ratio

# (label, summary field); all latencies, lower is better
METRICS = [("min", "min_ns"), ("avg", "avg_ns"), ("p99", "p99_ns"), ("p99.99", "p9999_ns"), ("max", "max_ns")]


PERCENTILE_KEYS = ("p99_ns", "p9999_ns")


def ratio_text(name: str, ratio: float | None, bound: str | None = None) -> str:
    """ratio = first / this, so > 1 means this run is lower (better); bound:
    whose value is only a lower bound ('the first run's', 'a'), which makes no ratio."""
    if bound:
        return f"{name} not comparable ({bound} lower bound)"
    if ratio is None:
        return f"{name} n/a"
    if ratio == 1:
        return f"{name} same"
    # never '1.0× lower': as many digits as it takes to show which way it goes
    return f"{name} {format_ratio(ratio)}× lower" if ratio > 1 else f"{name} {format_ratio(1 / ratio)}× higher"


def compare_runs(runs: list[RunResult]) -> list[dict[str, Any]]:
    one_kind(runs)
    base = summarize_all(runs[0])
    rows = []
    for r in runs:
        s = summarize_all(r)
        ratios = {}
        # a percentile that is only a lower bound (the blog CSV) divides into no ratio
        bound = base.percentiles_lower_bounds or s.percentiles_lower_bounds
        for _, key in METRICS:
            a, b = getattr(base, key), getattr(s, key)
            ratios[key] = a / b if a and b and not (bound and key in PERCENTILE_KEYS) else None
        rows.append({
            "run_id": r.run_id,
            "label": r.label,
            "engine": r.engine,
            "state": r.state,
            "kernel_release": r.system.get("kernel_release"),
            "preempt_model": r.system.get("preempt_model"),
            "loads": r.config.get("loads") or [],
            "loads_text": loads_text(r.config),
            "duration_s": r.duration_s,
            "count": s.count,
            **{key: getattr(s, key) for _, key in METRICS},
            "p99_text": percentile_text(s, s.p99_ns), "p9999_text": percentile_text(s, s.p9999_ns),
            "overflow": s.overflow,
            "percentiles_lower_bounds": s.percentiles_lower_bounds,
            "overruns": s.overruns,
            "ratio_to_first": ratios,
            "versus_first": "first run" if r is runs[0] else ", ".join(
                ratio_text(name, ratios[key], _bound(base, s) if key in PERCENTILE_KEYS else None)
                for name, key in METRICS if name in ("p99", "max")),
        })
    return rows


def _bound(base, this) -> str | None:
    """Whose percentiles are only lower bounds, in the words of the comparison."""
    if this.percentiles_lower_bounds:
        return "a"
    return "the first run's is a" if base.percentiles_lower_bounds else None


# -- CPU benchmark runs (kind "bench") ----------------------------------------

def one_kind(runs: list[RunResult]) -> str:
    """The kind all runs share; latency and benchmark runs measure different
    things and cannot sit in one comparison."""
    kinds = {r.kind for r in runs}
    if len(kinds) > 1:
        bench = next(r for r in runs if r.kind == "bench")
        other = next(r for r in runs if r.kind != "bench")
        raise UserError(f"{bench.run_id} is a CPU benchmark and {other.run_id} a latency run, which do not compare: "
                        "compare latency runs with latency runs and bench runs with bench runs")
    return kinds.pop()


def slower_text(ratio: float | None, what: str) -> str:
    """ratio = this run's solve time / the first run's, so > 1 means slower."""
    if ratio is None:
        return f"n/a {what}"
    if round(ratio, 2) == 1:
        return f"same speed {what}"
    return f"{ratio:.2f}× slower {what}" if ratio > 1 else f"{1 / ratio:.2f}× faster {what}"


def compare_bench(runs: list[RunResult]) -> list[dict[str, Any]]:
    """Bench runs side by side: per thread count the median solve time and
    stress-ng's rate, each as a ratio to the first run."""
    one_kind(runs)
    sizes = {r.run_id: (r.bench or {}).get("n") for r in runs}
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"N={n} ({run_id})" for run_id, n in sizes.items())
        raise UserError(f"these bench runs solved different problems ({shown}): compare runs made with the same --n")
    base = {row["threads"]: row for row in summarize_bench(runs[0].bench or {})}
    base_method = ((runs[0].bench or {}).get("stress_ng") or {}).get("method")
    multi = sorted({row["threads"] for r in runs for row in summarize_bench(r.bench or {}) if row["threads"] > 1})

    def what(threads: int) -> str:
        if threads == 1:
            return "single-thread"
        return "multi-thread" if len(multi) == 1 else f"{threads}-thread"

    out = []
    for r in runs:
        bench = r.bench or {}
        same_method = (bench.get("stress_ng") or {}).get("method") == base_method
        rows = []
        for row in summarize_bench(bench):
            b = base.get(row["threads"])
            t_ratio = row["median_s"] / b["median_s"] if b and b["median_s"] and row["median_s"] else None
            s_ratio = (b["stress_bogo_ops_per_s"] / row["stress_bogo_ops_per_s"]
                       if b and same_method and b["stress_bogo_ops_per_s"] and row["stress_bogo_ops_per_s"] else None)
            rows.append({**row, "what": what(row["threads"]), "time_ratio_to_first": t_ratio,
                         "stress_ratio_to_first": s_ratio})
        ordered = sorted(rows, key=lambda x: -x["threads"])  # multi-thread first, as people quote it
        solve = [slower_text(x["time_ratio_to_first"], x["what"]) for x in ordered if x["time_ratio_to_first"]]
        stress = [slower_text(x["stress_ratio_to_first"], x["what"]) for x in ordered if x["stress_ratio_to_first"]]
        if r is runs[0]:
            versus = "first run"
        else:
            versus = f"{r.label or r.run_id} is " + (", ".join(solve) or "not comparable (no common thread count)")
            if stress:
                versus += f"; stress-ng: {', '.join(stress)}"
        out.append({
            "run_id": r.run_id,
            "label": r.label,
            "state": r.state,
            "kernel_release": r.system.get("kernel_release"),
            "preempt_model": r.system.get("preempt_model"),
            "board_model": r.system.get("board_model"),
            "n": bench.get("n"),
            "stress_method": (bench.get("stress_ng") or {}).get("method"),
            "threads": rows,
            "versus_first": versus,
        })
    return out
