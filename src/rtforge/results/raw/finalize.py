"""Turning a run's raw output into the stored result: ``finalize`` reads
the engine's own files (the probe's, cyclictest's, a benchmark's) into the
result.  It reads files only -- through rawfile, bounded and without
following links -- and starts nothing: which state a run ended in, and
when to finalize it, is the run lifecycle's (measure/lifecycle.py).
"""

from __future__ import annotations

import json
import re
from email.utils import parsedate_to_datetime
from pathlib import Path

from ...units import format_us
from ..checks import run_warnings
from ..hist import Histogram
from ..model import RunResult
from ..store import rawfile
from ..system import describe
from . import cyclictest, probe, rtla_analysis

# probe.json "state" -> result state
_PROBE_STATES = {"done": "complete", "interrupted": "interrupted", "running": "killed", "failed": "failed"}
EARLY_S = 5          # a worst case in the first seconds may be the loads starting, not the system


def _probe_bucket(v: int) -> tuple[int, int]:
    """The probe's log-linear bucket holding v (probe/hist.c)."""
    if v < 128:
        return v, v
    shift = v.bit_length() - 7
    lo = v >> shift << shift
    return lo, lo + (1 << shift) - 1


def _reconcile_series(result: RunResult, rows: list[dict]) -> str | None:
    """A probe killed between checkpoints (SIGKILL, OOM): its per-second
    series goes on past the last checkpoint.  Those wake-ups are known only
    by each second's count and maximum, so they are counted at that maximum
    -- an upper bound, like every bucket bound -- and the average becomes
    unknown.  Nothing measured is dropped, nothing is invented."""
    added = 0
    for i, c in enumerate(result.cpus):
        col = [(r["count"][i], r["max_ns"][i], r["overruns"][i]) for r in rows if i < len(r.get("count") or [])]
        excess = sum(n for n, _, _ in col) - c.count
        if excess <= 0:
            continue
        buckets = {lo: [lo, hi, n] for lo, hi, n in c.hist.to_buckets()}
        extra_max = -1
        for n, m, _ in reversed(col):  # the newest samples are the ones the checkpoint lacks
            take = min(n, excess)
            if take and m is not None:
                lo, hi = _probe_bucket(m)
                buckets.setdefault(lo, [lo, hi, 0])[2] += take
                extra_max = max(extra_max, m)
                added += take
            excess -= take
            if excess <= 0:
                break
        c.hist = Histogram.from_buckets(sorted(buckets.values()))
        c.count = c.hist.total
        c.max_ns = max(extra_max, c.max_ns or 0) if c.count else None
        c.min_ns = c.min_ns if c.min_ns is not None else int(c.hist.lo_ns[0]) if c.count else None
        c.overruns = max(c.overruns or 0, sum(o for _, _, o in col))
        c.sum_ns = None
    if not added:
        return None
    return (f"{added:,} wake-ups after the probe's last checkpoint are known only from its per-second series: "
            "each is counted at its second's maximum, so percentiles are upper bounds and the average is unknown")


def _from_probe(result: RunResult, raw: Path) -> tuple[str, list[str]]:
    doc = probe.read_probe_json(raw)
    result.cpus = probe.cpus_from_probe(doc)
    # The probe's own metadata, taken right before its first wake-up, also
    # records the /dev/cpu_dma_latency value it held.
    result.system = describe(doc["meta"])
    result.duration_s = doc["elapsed_ns"] / 1e9
    result.engine_argv = doc["meta"].get("argv") or result.engine_argv
    rows = probe.read_jsonl(raw / "series.jsonl")
    cpus = doc["config"]["cpus"]
    result.series = probe.series_from_rows(rows, cpus)
    result.telemetry = probe.telemetry_from_rows(probe.read_jsonl(raw / "telemetry.jsonl"), doc["meta"])
    result.top_spikes = probe.top_spikes(raw)
    result.config.setdefault("phase", doc["config"].get("phase", "spread"))  # before --phase: always spread
    notes = []
    if doc["state"] == "running" and rows and (note := _reconcile_series(result, rows)):
        notes.append(note)
        result.duration_s = max(result.duration_s, float(len(rows)))
    return _PROBE_STATES.get(doc["state"], "killed"), notes


def _from_cyclictest(result: RunResult, raw: Path) -> tuple[str, list[str]]:
    state = "complete"
    try:
        data = rawfile.read_bytes(raw, "cyclictest.json")
        if data is None:
            raise ValueError("no cyclictest.json")
        doc = json.loads(data)
        result.cpus = cyclictest.cpus_from_json(doc, result.config.get("histogram_us"))
        start, end = (parsedate_to_datetime(doc[k]) for k in ("start_time", "end_time"))
        result.duration_s = (end - start).total_seconds()
        # Those times have whole seconds (an 8 s run shows as 7 to 9 s); the
        # wake-ups it counted at its interval tell the time it measured.
        interval_us = result.config.get("interval_us")
        counts = [c.count for c in result.cpus if c.count]
        if interval_us and counts:
            result.duration_s = round(max(counts) * interval_us / 1e6, 3)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        # Killed before it could write JSON: its last status lines remain.
        text = rawfile.read_text(raw, "cyclictest.out") or ""
        result.cpus = cyclictest.cpus_from_status(text, result.config.get("cpus") or [])
        state = "killed"
    # The metadata was taken before cyclictest started, by a process that
    # held no /dev/cpu_dma_latency; cyclictest says on its first line
    # whether it held it, and that is the truth for this run.
    if (m := _DMA_RE.search((rawfile.read_text(raw, "cyclictest.out") or "")[:4096])) is not None:
        result.system["cpu_dma_latency_us"] = int(m[1])
    monitor = raw / "monitor"
    if rawfile.exists(raw, "monitor/probe.json"):
        meta = probe.read_probe_json(monitor)["meta"]
        result.telemetry = probe.telemetry_from_rows(probe.read_jsonl(monitor / "telemetry.jsonl"), meta)
    return state, []


_DMA_RE = re.compile(r"^# /dev/cpu_dma_latency set to ([0-9]{1,9})us$", re.M)


def _from_bench(result: RunResult, raw: Path) -> tuple[str, list[str]]:
    from ..bench.rawsteps import bench_from_steps  # bench runs only

    return bench_from_steps(result, raw)


_ENGINES = {"probe": _from_probe, "cyclictest": _from_cyclictest, "nqueens": _from_bench}


def early_worst(result: RunResult) -> str | None:
    """A warning when the worst wake-up came in the first EARLY_S seconds of
    a run several times that long: loads still starting, not the system."""
    s = result.series
    if not s or not s.get("t_s") or (result.duration_s or 0) < 3 * EARLY_S:
        return None
    worst, worst_t, rest = -1, None, -1
    for col in s["max_ns"]:
        for t, m in zip(s["t_s"], col):
            if m is None:
                continue
            if t < EARLY_S and m > worst:
                worst, worst_t = m, t
            elif t >= EARLY_S:
                rest = max(rest, m)
    if worst_t is None or worst <= rest:
        return None
    settle = result.config.get("settle_s")
    why = (f" (the loads had {settle:g} s to start)" if settle else
           " (no settle time before measuring)" if settle == 0 and result.config.get("loads") else "")
    return (f"the worst wake-up ({format_us(worst, unit=True)}) came {worst_t} s into the run{why}, "
            f"{worst / max(rest, 1):.1f}× the worst of the rest: it may be start-up, not the system; "
            "look at the timeline, and give loads longer to start with --settle-s")


def finalize(result: RunResult, run_dir: Path, state: str | None = None, end_reason: str | None = None) -> RunResult:
    """Fill result from run_dir/raw; state defaults to what the engine reported."""
    engine_state, notes = _ENGINES[result.engine](result, run_dir / "raw")
    if result.config.get("trace"):
        result.trace = rtla_analysis.read_run(run_dir / "raw")
        if result.trace and result.trace["failed"]:
            notes.append(f"the trace is incomplete: {result.trace['failed']}; spikes after it were not analysed")
        if result.trace and result.trace["limit_reached"]:
            notes.append(f"rtla analysed {result.trace['rtla_runs']} spikes, its limit: later spikes were "
                         "not traced; raise --spike-us so only the worst are analysed")
    result.state = state or engine_state
    result.end_reason = end_reason or result.end_reason
    result.owner = None
    if result.kind == "bench":
        result.warnings = notes  # the benchmark's own checks
    else:
        result.warnings = run_warnings(result) + notes
        if early := early_worst(result):
            result.warnings.append(early)
    return result


def engine_cpu_s(run_dir: Path) -> float | None:
    """CPU time (user + system) the engine used, from the runner's `times`
    before and after it: the children's line of each."""
    try:
        text = rawfile.read_text(run_dir, "raw/runner/times") or ""
    except rawfile.RawFileError:
        return None
    values = [float(m) * 60 + float(s) for m, s in re.findall(r"([0-9]{1,9})m([0-9.]{1,20})s", text)]
    if len(values) != 8:
        return None
    return (values[6] + values[7]) - (values[2] + values[3])
