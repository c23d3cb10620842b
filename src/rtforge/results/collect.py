"""Turning a run's raw output into the stored result.

One path for every ending: a run that finishes, one stopped on request, one
whose rtforge was killed (finished later by `attach`, `fetch` or the next
`runs`) and one whose runner or probe was killed all go through ``finish``
(the runner's verdict, then ``finalize``); only the state differs.

The runner (data/runner.sh) keeps its bookkeeping in raw/runner/: ``state``
(one of RUNNER_STATES once it ended), ``events``, pid files and ``times``.
Runs from before the runner, and the boot test's, have no such folder:
their engine's own files decide.
"""

from __future__ import annotations

import json
import re
import subprocess
from email.utils import parsedate_to_datetime
from pathlib import Path

from . import cyclictest, probe_output, timerlat
from .checks import run_warnings
from .hist import Histogram
from .model import RunResult
from .system import describe

# The runner's final words -> result state ("done": the engine's own says).
RUNNER_STATES = {"done": "complete", "interrupted": "interrupted", "killed": "killed", "failed": "failed"}
# probe.json "state" -> result state
_PROBE_STATES = {"done": "complete", "interrupted": "interrupted", "running": "killed", "failed": "failed"}
EARLY_S = 5          # a worst case in the first seconds may be the loads starting, not the system
REAP_TIMEOUT_S = 60  # the runner's reap ends the engine (15 s) and the loads (5 s)


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
    doc = probe_output.read_probe_json(raw)
    result.cpus = probe_output.cpus_from_probe(doc)
    # The probe's own metadata, taken right before its first wake-up, also
    # records the /dev/cpu_dma_latency value it held.
    result.system = describe(doc["meta"])
    result.duration_s = doc["elapsed_ns"] / 1e9
    result.engine_argv = doc["meta"].get("argv") or result.engine_argv
    rows = probe_output.read_jsonl(raw / "series.jsonl")
    cpus = doc["config"]["cpus"]
    result.series = probe_output.series_from_rows(rows, cpus)
    result.telemetry = probe_output.telemetry_from_rows(probe_output.read_jsonl(raw / "telemetry.jsonl"), doc["meta"])
    result.top_spikes = probe_output.top_spikes(raw)
    result.config.setdefault("phase", doc["config"].get("phase", "spread"))  # before --phase: always spread
    notes = []
    if doc["state"] == "running" and rows and (note := _reconcile_series(result, rows)):
        notes.append(note)
        result.duration_s = max(result.duration_s, float(len(rows)))
    return _PROBE_STATES.get(doc["state"], "killed"), notes


def _from_cyclictest(result: RunResult, raw: Path) -> tuple[str, list[str]]:
    path = raw / "cyclictest.json"
    state = "complete"
    try:
        doc = json.loads(path.read_text())
        result.cpus = cyclictest.cpus_from_json(doc, result.config.get("histogram_us"))
        start, end = (parsedate_to_datetime(doc[k]) for k in ("start_time", "end_time"))
        result.duration_s = (end - start).total_seconds()
        # Those times have whole seconds (an 8 s run shows as 7 to 9 s); the
        # wake-ups it counted at its interval tell the time it measured.
        interval_us = result.config.get("interval_us")
        counts = [c.count for c in result.cpus if c.count]
        if interval_us and counts:
            result.duration_s = round(max(counts) * interval_us / 1e6, 3)
    except (OSError, ValueError, KeyError):
        # Killed before it could write JSON: its last status lines remain.
        out = raw / "cyclictest.out"
        text = out.read_text(errors="replace") if out.exists() else ""
        result.cpus = cyclictest.cpus_from_status(text, result.config.get("cpus") or [])
        state = "killed"
    # The metadata was taken before cyclictest started, by a process that
    # held no /dev/cpu_dma_latency; cyclictest says on its first line
    # whether it held it, and that is the truth for this run.
    if (m := _DMA_RE.search(_head(raw / "cyclictest.out"))) is not None:
        result.system["cpu_dma_latency_us"] = int(m[1])
    monitor = raw / "monitor"
    if (monitor / "probe.json").exists():
        meta = probe_output.read_probe_json(monitor)["meta"]
        result.telemetry = probe_output.telemetry_from_rows(probe_output.read_jsonl(monitor / "telemetry.jsonl"), meta)
    return state, []


_DMA_RE = re.compile(r"^# /dev/cpu_dma_latency set to ([0-9]{1,9})us$", re.M)


def _head(path: Path, limit: int = 4096) -> str:
    """The first bytes of an engine's output (its header lines), or ''."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _from_bench(result: RunResult, raw: Path) -> tuple[str, list[str]]:
    from .benchcollect import bench_from_steps  # bench runs only

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
    return (f"the worst wake-up ({worst / 1000:.1f} µs) came {worst_t} s into the run{why}, "
            f"{worst / max(rest, 1):.1f}× the worst of the rest: it may be start-up, not the system; "
            "look at the timeline, and give loads longer to start with --settle-s")


def finalize(result: RunResult, run_dir: Path, state: str | None = None, end_reason: str | None = None) -> RunResult:
    """Fill result from run_dir/raw; state defaults to what the engine reported."""
    engine_state, notes = _ENGINES[result.engine](result, run_dir / "raw")
    if result.config.get("trace"):
        result.trace = timerlat.read_run(run_dir / "raw")
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


def runner_state(run_dir: Path) -> tuple[str | None, str]:
    """(word, detail) of the runner's state file; (None, '') without one."""
    path = run_dir / "raw" / "runner" / "state"
    try:
        word, _, detail = path.read_text().strip().partition(" ")
    except OSError:
        return None, ""
    return word, detail


def finish(result: RunResult, run_dir: Path) -> RunResult:
    """A run whose runner has ended: its verdict, the engine's data, its notes."""
    word, detail = runner_state(run_dir)
    if word is None:
        finalize(result, run_dir, end_reason=result.end_reason)
    else:
        state = RUNNER_STATES.get(word, "killed")
        if word not in RUNNER_STATES:
            detail = "the runner ended without saying how"
        finalize(result, run_dir, state=None if state == "complete" else state, end_reason=detail or None)
    events = run_dir / "raw" / "runner" / "events"
    for note in events.read_text().splitlines() if events.exists() else []:
        result.warnings.append(f"{note}: see raw/loads.log of this run for why")
    if result.config.get("cpus") is None:
        result.config["cpus"] = [c.cpu for c in result.cpus]
    return result


def engine_cpu_s(run_dir: Path) -> float | None:
    """CPU time (user + system) the engine used, from the runner's `times`
    before and after it: the children's line of each."""
    path = run_dir / "raw" / "runner" / "times"
    try:
        values = [float(m) * 60 + float(s) for m, s in re.findall(r"([0-9]+)m([0-9.]+)s", path.read_text())]
    except OSError:
        return None
    if len(values) != 8:
        return None
    return (values[6] + values[7]) - (values[2] + values[3])


def salvage(result: RunResult, run_dir: Path) -> RunResult:
    """A run whose owner is gone: keep whatever the engine last wrote.  A run
    of this machine still holds its runner: it is asked to end what the
    killed run left behind (engine, loads, scratch files) -- or, when the
    runner lives on (its rtforge was killed), the run stays running."""
    runner = run_dir / "runner.sh"
    if runner.exists():
        try:
            r = subprocess.run(["sh", str(runner), "reap", str(run_dir)], capture_output=True, text=True,
                               timeout=REAP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            r = None
        if r is not None and r.stdout.strip() == "running":
            pid = (run_dir / "raw" / "runner" / "runner.pid").read_text().split()
            result.owner = {"pid": int(pid[0]), "start_ticks": int(pid[1])}
            return result
    try:
        finish(result, run_dir)
        result.end_reason = result.end_reason or "rtforge was killed"
    except Exception as e:  # damaged raw output must not hide the run
        result.state = "killed"
        result.owner = None
        result.warnings = [f"the raw output could not be read ({e}); only the metadata is kept"]
    remove_inputs(run_dir)
    return result


# What a run folder holds only while its runner may need it.
RUNNER_INPUTS = ("runner.sh", "rtprobe", "nqueens", "bench.sh", "engine.cmd", "monitor.cmd", "trace.cmd", "loads",
                 "tmp")


def remove_inputs(run_dir: Path) -> None:
    """The run's programs and command files: once it ended, the store keeps
    result.json and raw/ only (what a run fetched from a board holds)."""
    import shutil

    for name in RUNNER_INPUTS:
        p = run_dir / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists() or p.is_symlink():
            p.unlink(missing_ok=True)
