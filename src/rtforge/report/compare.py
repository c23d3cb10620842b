"""Runs side by side, with ratios to the first run ("max 3.2× lower")."""

from __future__ import annotations

from typing import Any

from ..results.model import RunResult
from ..results.stats import summarize_all

# (label, summary field); all latencies, lower is better
METRICS = [("min", "min_ns"), ("avg", "avg_ns"), ("p99", "p99_ns"), ("p99.99", "p9999_ns"), ("max", "max_ns")]


def ratio_text(name: str, ratio: float | None) -> str:
    """ratio = first / this, so > 1 means this run is lower (better)."""
    if ratio is None:
        return f"{name} n/a"
    if abs(ratio - 1) < 0.01:
        return f"{name} same"
    return f"{name} {ratio:.1f}× lower" if ratio > 1 else f"{name} {1 / ratio:.1f}× higher"


def compare_runs(runs: list[RunResult]) -> list[dict[str, Any]]:
    base = summarize_all(runs[0])
    rows = []
    for r in runs:
        s = summarize_all(r)
        ratios = {}
        for _, key in METRICS:
            a, b = getattr(base, key), getattr(s, key)
            ratios[key] = a / b if a and b else None
        rows.append({
            "run_id": r.run_id,
            "label": r.label,
            "engine": r.engine,
            "state": r.state,
            "kernel_release": r.system.get("kernel_release"),
            "preempt_model": r.system.get("preempt_model"),
            "loads": r.config.get("loads") or [],
            "duration_s": r.duration_s,
            "count": s.count,
            **{key: getattr(s, key) for _, key in METRICS},
            "overflow": s.overflow,
            "overruns": s.overruns,
            "ratio_to_first": ratios,
            "versus_first": "first run" if r is runs[0] else ", ".join(
                ratio_text(name, ratios[key]) for name, key in METRICS if name in ("p99", "max")),
        })
    return rows
