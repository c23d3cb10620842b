"""Statistics derived from stored results (never stored themselves)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..units import format_us
from .display import spike_lines
from .hist import PERCENTILES, Histogram
from .model import CpuResult, RunResult

# vcgencmd get_throttled / the firmware's get_throttled: bit -> meaning.
THROTTLE_BITS = {
    0: "under-voltage",
    1: "ARM frequency capped",
    2: "throttled",
    3: "soft temperature limit",
}
SINCE_BOOT_SHIFT = 16
HOT_MC = 80_000  # Pi firmware starts throttling at 80-85 °C


@dataclass
class CpuSummary:
    cpu: int | str              # "all" for the whole run
    count: int
    min_ns: int | None
    avg_ns: float | None
    p50_ns: int | None          # None: no samples, or beyond the histogram's range
    p99_ns: int | None
    p999_ns: int | None
    p9999_ns: int | None
    max_ns: int | None
    overruns: int | None
    overflow: int | None        # None: the file did not say (an import that lost cyclictest's summary)
    spikes: int | None
    histogram: bool = True      # False: no histogram was kept, so every percentile is unknown
    percentiles_lower_bounds: bool = False  # samples beyond the range may be missing: the true ones are higher

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _summary(cpu, count, min_ns, max_ns, sum_ns, overruns, hist: Histogram, spikes) -> CpuSummary:
    q = {name: hist.quantile(frac, min_ns, max_ns) for name, frac in PERCENTILES.items()}
    avg = sum_ns / count if sum_ns is not None and count else None
    return CpuSummary(
        cpu=cpu, count=count, min_ns=min_ns, avg_ns=avg,
        p50_ns=q["p50"], p99_ns=q["p99"], p999_ns=q["p999"], p9999_ns=q["p9999"],
        max_ns=max_ns, overruns=overruns, overflow=hist.overflow if hist.overflow_known else None, spikes=spikes,
        histogram=hist.kept, percentiles_lower_bounds=not hist.overflow_known,
    )


def percentile_text(s: CpuSummary, value_ns: int | None, fmt=format_us) -> str:
    """A percentile for people: its value ('≥' before it when it is a lower
    bound), '–' without samples, 'unknown' without a histogram, '> range'
    when it lies among overflowed samples."""
    if value_ns is not None:
        return ("≥" if s.percentiles_lower_bounds else "") + fmt(value_ns)
    if not s.count:
        return "–"
    return "> range" if s.histogram else "unknown"


def summarize_cpu(c: CpuResult) -> CpuSummary:
    return _summary(c.cpu, c.count, c.min_ns, c.max_ns, c.sum_ns, c.overruns, c.hist, c.spikes)


def _opt_sum(values):
    values = list(values)
    return None if not values or any(v is None for v in values) else sum(values)


def _opt_agg(fn, values):
    values = [v for v in values if v is not None]
    return fn(values) if values else None


def merged_histogram(result: RunResult) -> Histogram:
    """All CPUs' histograms of a run added together."""
    cpus = result.cpus
    hist = cpus[0].hist if cpus else Histogram.empty()
    for c in cpus[1:]:
        hist = hist.merged(c.hist)
    return hist


def summarize_all(result: RunResult) -> CpuSummary:
    """All CPUs of a run as one population of wake-ups."""
    cpus = result.cpus
    hist = merged_histogram(result)
    return _summary(
        "all",
        sum(c.count for c in cpus),
        _opt_agg(min, (c.min_ns for c in cpus)),
        _opt_agg(max, (c.max_ns for c in cpus)),
        _opt_sum(c.sum_ns for c in cpus),
        _opt_sum(c.overruns for c in cpus),
        hist,
        _opt_sum(c.spikes for c in cpus),
    )


def throttle_flags(value: int) -> list[str]:
    """Names of the set bits, 'now' and 'since boot'."""
    now = [name for bit, name in THROTTLE_BITS.items() if value >> bit & 1]
    past = [f"{name} (since boot)" for bit, name in THROTTLE_BITS.items() if value >> (bit + SINCE_BOOT_SHIFT) & 1]
    return now + past


def telemetry_summary(telemetry: dict[str, Any] | None) -> dict[str, Any]:
    """Temperature range and throttling seen *during* the run.

    The firmware's "since boot" bits may predate the run, so they only count
    when they appear between the first and last sample.
    """
    out: dict[str, Any] = {"temp_min_mc": None, "temp_max_mc": None, "throttled_seen": None, "throttle_flags": []}
    if not telemetry:
        return out
    temps = [v for series in telemetry.get("temp_mc", {}).values() for v in series if v is not None]
    if temps:
        out["temp_min_mc"], out["temp_max_mc"] = min(temps), max(temps)
    thr = [v for v in telemetry.get("throttled", []) if v is not None]
    if thr:
        live = 0
        for v in thr:
            live |= v & 0xF
        new_since_boot = (thr[-1] & ~thr[0]) >> SINCE_BOOT_SHIFT & 0xF
        seen = live | new_since_boot
        out["throttled_seen"] = bool(seen)
        out["throttle_flags"] = [name for bit, name in THROTTLE_BITS.items() if seen >> bit & 1]
    return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def irq_summary(series: dict[str, Any] | None) -> dict[str, Any] | None:
    """The interrupts in the second of the run's worst wake-up, next to that
    CPU's usual second, and the irq/ threads' CPU use then and at most: a
    worst case that came with an interrupt storm or a busy threaded handler
    points at its driver.  None when the series has no interrupt columns."""
    if not series or not series.get("irqs"):
        return None
    worst = None  # (max_ns, cpu index, second index)
    for i, col in enumerate(series.get("max_ns") or []):
        for k, m in enumerate(col):
            if _num(m) and (worst is None or m > worst[0]):
                worst = (m, i, k)
    if worst is None:
        return None
    _, i, k = worst
    irqs = series["irqs"][i] if i < len(series["irqs"]) else []
    usual = sorted(v for v in irqs if _num(v))
    pct, top, top_pct = (series.get(key) or [] for key in ("irq_thread_pct", "irq_thread_top", "irq_thread_top_pct"))
    peak = max((j for j, v in enumerate(pct) if _num(v)), key=lambda j: pct[j], default=None)
    return {
        "cpu": (series.get("cpus") or [None] * (i + 1))[i], "t_s": series["t_s"][k],
        "irqs": irqs[k] if k < len(irqs) and _num(irqs[k]) else None,
        "irqs_median": usual[len(usual) // 2] if usual else None,
        "irq_thread_pct": pct[k] if k < len(pct) and _num(pct[k]) else None,
        "irq_thread_top": top[k] if k < len(top) and isinstance(top[k], str) else None,
        "irq_thread_top_pct": top_pct[k] if k < len(top_pct) and _num(top_pct[k]) else None,
        "irq_thread_max_pct": pct[peak] if peak is not None else None,
        "irq_thread_max_top": top[peak] if peak is not None and peak < len(top) and isinstance(top[peak], str)
        else None,
    }


def run_header(result: RunResult) -> dict[str, Any]:
    """The keys every `rtforge show --json` starts with, whatever the kind of run."""
    return {
        "run_id": result.run_id,
        "kind": result.kind,
        "engine": result.engine,
        "label": result.label,
        "state": result.state,
        "partial": result.partial,
        "host": result.host,
        "start_time": result.start_time,
        "duration_s": result.duration_s,
        "kernel_release": result.system.get("kernel_release"),
        "preempt_model": result.system.get("preempt_model"),
        "config": result.config,
    }


def show_dict(result: RunResult) -> dict[str, Any]:
    """What `rtforge show --json` prints: stable keys for scripts."""
    cpus = [summarize_cpu(c).to_dict() for c in result.cpus]
    return {
        **run_header(result),
        "max_ns": result.max_ns,
        "all": summarize_all(result).to_dict(),
        "cpus": cpus,
        "telemetry": telemetry_summary(result.telemetry),
        "interrupts": irq_summary(result.series),
        "traced_spikes": spike_lines(result.trace, n=len((result.trace or {}).get("spikes") or [])),
        # rtla's IRQ and return-to-user latencies beside the thread's (an import of its output)
        "other_latencies": (result.source or {}).get("other_latencies") if isinstance(result.source, dict) else None,
        "warnings": result.warnings,
        "reproducer": result.reproducer,
    }
