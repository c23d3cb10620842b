"""Warnings about a run, each saying what to change (architecture rule 10)."""

from __future__ import annotations

from ..units import format_seconds, plural
from .model import RunResult
from .stats import HOT_MC, telemetry_summary
from .system import system_warnings


def run_warnings(result: RunResult) -> list[str]:
    warn = list(system_warnings(result.system))
    requested = result.requested.get("duration_s")
    if result.state in ("interrupted", "killed"):
        span = format_seconds(result.duration_s) if result.duration_s is not None else "an unknown time"
        asked = f" of the requested {format_seconds(requested)}" if requested else ""
        warn.append(
            f"the run was {result.state} ({result.end_reason or 'no reason recorded'}) after {span}{asked}: "
            "its statistics cover only that part; repeat it for a full run"
        )
    overruns = sum(c.overruns or 0 for c in result.cpus)
    if overruns:
        warn.append(
            f"{plural(overruns, 'whole period')} {'was' if overruns == 1 else 'were'} missed (overruns): the "
            "measuring thread did not run for at least one "
            "interval; look for higher-priority RT tasks or IRQ threads on those CPUs, or lengthen --interval-us"
        )
    overflow = sum(c.hist.overflow for c in result.cpus if c.hist.range_max_ns is not None and c.hist.range_max_ns >= 0)
    if overflow:
        warn.append(_overflow_warning(result, overflow))
    dropped = sum(c.spikes_dropped for c in result.cpus)
    if dropped:
        warn.append(
            f"{plural(dropped, 'spike')} {'was' if dropped == 1 else 'were'} counted but not logged (more than the "
            "log holds per 100 ms); "
            "raise --spike-us to log only the ones that matter"
        )
    tel = telemetry_summary(result.telemetry)
    if tel["throttled_seen"]:
        warn.append(
            f"the firmware reported {', '.join(tel['throttle_flags'])} during the run: latencies are not "
            "representative; fix the power supply (under-voltage) or cooling (throttling) and repeat"
        )
    if tel["temp_max_mc"] is not None and tel["temp_max_mc"] >= HOT_MC:
        warn.append(
            f"the SoC reached {tel['temp_max_mc'] / 1000:.1f} °C (throttling starts at 80 °C): "
            "add a heatsink or fan and repeat"
        )
    return warn


def overflow_text(overflow: int) -> str:
    """How an overflow warning begins ('1 sample fell beyond'): the importers find theirs by it."""
    return f"{plural(overflow, 'sample')} fell beyond"


def _overflow_warning(result: RunResult, overflow: int) -> str:
    """Samples beyond a cyclictest histogram: what is lost, and -- for a run
    rtforge made -- what to change; an imported file cannot be rerun."""
    size = result.config.get("histogram_us")
    where = f"the {size} µs histogram" if size else "the histogram (its size is not recorded in the file)"
    fact = f"{overflow_text(overflow)} {where}, so their values are lost and high percentiles may be unknown"
    if result.engine == "import":
        return fact + "; measure with a larger -h next time, or with rtforge's probe, which keeps every value"
    return fact + "; rerun with a larger --histogram-us or with the probe engine"
