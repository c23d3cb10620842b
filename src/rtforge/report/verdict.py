"""The plain answer: is this system safe for my cycle time?

For a cycle time T, the measured worst wake-up latency L must leave room
for the work of the cycle.  margin = T / L.  A run fails when any wake-up
was later than T or a period was missed entirely; it is tight when the
worst wake-up used more than half the cycle; otherwise it passes.  When no
wake-up exceeded T, the 95 % upper bound on the per-cycle probability of one
doing so is 1 - 0.05^(1/N) (about 3/N, the "rule of three"): what a finite
run can and cannot promise.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UserError
from ..results.model import RunResult
from ..results.stats import merged_histogram, summarize_all

_UNITS_NS = {"ns": 1, "us": 1000, "µs": 1000, "ms": 1_000_000, "s": 1_000_000_000}
LONG_ENOUGH_S = 3600


def parse_cycle_time(text: str) -> int:
    """'1ms', '500us', '250µs', '0.5ms', '2000' (µs) -> ns."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*", text)
    if not m or float(m[1]) <= 0:
        raise UserError(f"'{text}' is not a cycle time: use e.g. 1ms, 500us or 250µs")
    return round(float(m[1]) * _UNITS_NS[m[2] or "us"])


def format_ns(ns: int) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns} ns"


def report_warnings(run: RunResult) -> list[str]:
    """What a report must say beyond the run's own warnings."""
    warn = []
    if run.config.get("emulated"):
        warn.append("measured inside QEMU: the latencies are emulation noise and say nothing about the hardware; "
                    "measure on the board with `rtforge latency HOST`")
    if run.duration_s is not None and run.duration_s < LONG_ENOUGH_S:
        warn.append(
            f"the run lasted {run.duration_s / 60:.1f} min: too short to meet the rare events that set the worst "
            "case; measure for hours (OSADL runs 100 million cycles, 5.5 h at 200 µs), e.g. --duration 6h"
        )
    if run.config.get("priority") in (None, 0) or run.config.get("policy") in ("other", "normal", "batch", "idle"):
        warn.append("measured without a real-time priority: the latencies include ordinary scheduling delays; "
                    "measure with SCHED_FIFO (rtforge latency --priority 90, or cyclictest -p90)")
    return warn


@dataclass
class Verdict:
    run_id: str
    label: str | None
    cycle_ns: int
    status: str                 # pass | tight | fail | unknown
    sentence: str
    worst_max_ns: int | None
    margin: float | None        # cycle time / worst max
    samples: int
    above: int                  # wake-ups later than the cycle time (lower bound if not exact)
    above_exact: bool
    overruns: int
    p95_bound: float | None     # per-cycle probability bound when none was above
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(run: RunResult, cycle_ns: int) -> Verdict:
    s = summarize_all(run)
    cyc = format_ns(cycle_ns)
    worst, n, overruns = s.max_ns, s.count, s.overruns or 0
    warnings = list(run.warnings) + report_warnings(run)
    if n == 0:
        return Verdict(run.run_id, run.label, cycle_ns, "unknown", f"no wake-ups were measured in {run.run_id}",
                       None, None, 0, 0, True, overruns, None, warnings)
    if worst is None:
        return _unknown_max(run, cycle_ns, n, overruns, warnings)
    if worst <= cycle_ns:
        above, exact = 0, True
    else:
        above, exact = merged_histogram(run).count_above(cycle_ns)
        above = max(above, 1)  # the max itself was above
    margin = cycle_ns / worst if worst else float("inf")
    bound = 1 - 0.05 ** (1 / n) if above == 0 else None
    if above or overruns:
        status = "fail"
        parts = []
        if above:
            parts.append(f"{'' if exact else 'at least '}{above:,} of {n:,} wake-ups came later than the cycle time")
        if overruns:
            parts.append(f"{overruns:,} periods were missed entirely")
        sentence = f"fails a {cyc} cycle: {' and '.join(parts)} (worst {worst / 1000:.1f} µs)"
    else:
        status = "tight" if worst * 2 > cycle_ns else "pass"
        head = "passes, but tightly," if status == "tight" else "passes"
        sentence = (f"{head} for a {cyc} cycle: the worst of {n:,} wake-ups was {worst / 1000:.1f} µs late, "
                    f"a margin of {margin:.1f}×; at 95 % confidence fewer than 1 in {1 / bound:,.0f} wake-ups "
                    f"would be later than {cyc}")
        if status == "tight":
            sentence += " (more than half of each cycle can be lost to wake-up latency)"
    return Verdict(run.run_id, run.label, cycle_ns, status, sentence, worst, margin, n, above, exact, overruns,
                   bound, warnings)


def _unknown_max(run: RunResult, cycle_ns: int, n: int, overruns: int, warnings: list[str]) -> Verdict:
    """A run whose maximum is unknown (the blog CSV keeps only the histogram):
    the samples it kept can still prove a failure, never a pass."""
    hist = merged_histogram(run)
    above, _ = hist.count_above(cycle_ns)
    cyc = format_ns(cycle_ns)
    highest = int(hist.hi_ns[hist.count > 0].max()) if hist.in_range else None
    if above or overruns:
        parts = [f"at least {above:,} of {n:,} wake-ups came later than the cycle time"] if above else []
        if overruns:
            parts.append(f"{overruns:,} periods were missed entirely")
        sentence = (f"fails a {cyc} cycle: {' and '.join(parts)} (the highest kept sample is "
                    f"{highest / 1000:.1f} µs; the true maximum is unknown)")
        return Verdict(run.run_id, run.label, cycle_ns, "fail", sentence, None, None, n, above, False, overruns,
                       None, warnings)
    shown = f" (the highest kept sample is {highest / 1000:.1f} µs)" if highest is not None else ""
    sentence = (f"cannot be judged for a {cyc} cycle: the run's maximum is unknown{shown}, so wake-ups later "
                "than the cycle time may have been lost; import the original cyclictest output with its '#' lines")
    return Verdict(run.run_id, run.label, cycle_ns, "unknown", sentence, None, None, n, 0, False, overruns, None,
                   warnings)
