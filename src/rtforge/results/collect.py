"""Turning an engine's raw output into the stored result.

One path for every ending: a run that finishes, one stopped with Ctrl-C,
and one whose rtforge was killed (salvaged later by the store) all go
through ``finalize``; only the state differs.
"""

from __future__ import annotations

import json
from email.utils import parsedate_to_datetime
from pathlib import Path

from . import cyclictest, probe_output
from .checks import run_warnings
from .model import RunResult
from .system import describe

# probe.json "state" -> result state
_PROBE_STATES = {"done": "complete", "interrupted": "interrupted", "running": "killed", "failed": "failed"}


def _from_probe(result: RunResult, raw: Path) -> str:
    doc = probe_output.read_probe_json(raw)
    result.cpus = probe_output.cpus_from_probe(doc)
    # The probe's own metadata, taken right before its first wake-up, also
    # records the /dev/cpu_dma_latency value it held.
    result.system = describe(doc["meta"])
    result.duration_s = doc["elapsed_ns"] / 1e9
    result.engine_argv = doc["meta"].get("argv") or result.engine_argv
    result.series = probe_output.series_from_rows(probe_output.read_jsonl(raw / "series.jsonl"), doc["config"]["cpus"])
    result.telemetry = probe_output.telemetry_from_rows(probe_output.read_jsonl(raw / "telemetry.jsonl"), doc["meta"])
    result.top_spikes = probe_output.top_spikes(raw)
    return _PROBE_STATES.get(doc["state"], "killed")


def _from_cyclictest(result: RunResult, raw: Path) -> str:
    path = raw / "cyclictest.json"
    state = "complete"
    try:
        doc = json.loads(path.read_text())
        result.cpus = cyclictest.cpus_from_json(doc, result.config.get("histogram_us"))
        if result.duration_s is None:
            start, end = (parsedate_to_datetime(doc[k]) for k in ("start_time", "end_time"))
            result.duration_s = (end - start).total_seconds()
    except (OSError, ValueError, KeyError):
        # Killed before it could write JSON: its last status lines remain.
        out = raw / "cyclictest.out"
        text = out.read_text(errors="replace") if out.exists() else ""
        result.cpus = cyclictest.cpus_from_status(text, result.config.get("cpus") or [])
        state = "killed"
    monitor = raw / "monitor"
    if (monitor / "probe.json").exists():
        meta = probe_output.read_probe_json(monitor)["meta"]
        result.telemetry = probe_output.telemetry_from_rows(probe_output.read_jsonl(monitor / "telemetry.jsonl"), meta)
    return state


def finalize(result: RunResult, run_dir: Path, state: str | None = None, end_reason: str | None = None) -> RunResult:
    """Fill result from run_dir/raw; state defaults to what the engine reported."""
    raw = run_dir / "raw"
    engine_state = {"probe": _from_probe, "cyclictest": _from_cyclictest}[result.engine](result, raw)
    result.state = state or engine_state
    result.end_reason = end_reason or result.end_reason
    result.owner = None
    result.warnings = run_warnings(result)
    return result


def salvage(result: RunResult, run_dir: Path) -> RunResult:
    """A run whose owner died: keep whatever the engine last wrote."""
    try:
        return finalize(result, run_dir, end_reason=result.end_reason or "rtforge was killed")
    except Exception as e:  # damaged raw output must not hide the run
        result.state = "killed"
        result.owner = None
        result.warnings = [f"the raw output could not be read ({e}); only the metadata is kept"]
        return result
