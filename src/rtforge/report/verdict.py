"""The plain answer: is this system safe for my cycle time?

The rules are written out for users in docs/verdict.md; in short, for a
cycle time T, a run's worst wake-up latency L and its measuring interval I:

    unknown  nothing was measured, the run was emulated (QEMU), or L is
             unknown and no kept sample was later than T
    fail     some wake-up came later than T (L > T, or a kept sample above
             T when L is unknown), or a period was missed entirely while
             I >= T (a missed period of a shorter interval is a late
             wake-up, already counted in L)
    tight    no wake-up later than T, but L > T / 2 (margin T / L < 2)
    pass     L <= T / 2

A partial run keeps its status (what was measured stands; a failure is a
failure) and says that it covers only the part measured.  When no wake-up
exceeded T, the 95 % upper bound on the per-cycle probability of one doing
so is 1 - 0.05^(1/N) (about 3/N, the "rule of three"): what a finite run
can and cannot promise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..results.model import RunResult
from ..results.stats import merged_histogram, summarize_all
from ..units import article, format_ns, format_ratio, format_seconds, format_us, parse_duration_ns, plural

LONG_ENOUGH_S = 3600
TIGHT_MARGIN = 2.0   # more than half of each cycle lost to wake-up latency


def parse_cycle_time(text: str) -> int:
    """'1ms', '500us', '250µs', '0.5ms', '750ns' -> ns; a number without a unit is refused."""
    return parse_duration_ns(text, "--cycle-time", "1ms, 500us or 250µs")


def report_warnings(run: RunResult) -> list[str]:
    """What a report must say beyond the run's own warnings."""
    warn = []
    if run.config.get("emulated"):
        warn.append("measured inside QEMU: the latencies are emulation noise and say nothing about the hardware; "
                    "measure on the board with `rtforge latency HOST`")
    if run.duration_s is not None and run.duration_s < LONG_ENOUGH_S:
        how = (" (its wake-ups times their interval: the file states no duration)"
               if run.config.get("duration_source") == "cycles × interval" else "")
        warn.append(
            f"the run lasted {format_seconds(run.duration_s)}{how}: too short to meet the rare events that set the "
            "worst case; measure for hours (OSADL runs 100 million cycles, 5.5 h at 200 µs), e.g. --duration 6h"
        )
    priority, policy = run.config.get("priority"), run.config.get("policy")
    if priority == 0 or policy in ("other", "normal", "batch", "idle"):
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
    above_at_most: int | None = None  # upper bound when above is not exact (None: none known)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _partial_note(run: RunResult) -> str:
    if not run.partial or run.state == "running":
        return ""
    took = f" {format_seconds(run.duration_s)}" if run.duration_s is not None else ""
    return f" (of the{took} measured before the run ended {run.state})"


def verdict(run: RunResult, cycle_ns: int) -> Verdict:
    s = summarize_all(run)
    cyc = format_ns(cycle_ns)
    a_cyc = f"{article(cyc)} {cyc}"   # an 84 µs cycle, a 1 ms cycle
    worst, n, overruns = s.max_ns, s.count, s.overruns or 0
    warnings = list(run.warnings) + report_warnings(run)

    def make(status, sentence, *, margin=None, above=0, exact=True, bound=None, worst_ns=worst, at_most=None):
        return Verdict(run.run_id, run.label, cycle_ns, status, sentence, worst_ns, margin, n, above, exact,
                       overruns, bound, warnings, at_most)

    if n == 0:
        return make("unknown", f"cannot be judged for {a_cyc} cycle: no wake-ups were measured")
    if run.config.get("emulated"):
        seen = f" (its worst emulated wake-up was {_us(worst)})" if worst is not None else ""
        return make("unknown", f"cannot be judged for {a_cyc} cycle: it was measured inside QEMU, whose latencies "
                               f"are emulation noise{seen}; measure on the board")
    if worst is None:
        return _unknown_max(run, cycle_ns, make)
    interval_ns = (run.config.get("interval_us") or 0) * 1000
    missed = overruns if interval_ns and interval_ns >= cycle_ns else 0
    late = late_count(run, cycle_ns)
    above, exact = late.at_least, late.exact
    margin = cycle_ns / worst if worst else float("inf")
    note = _partial_note(run)
    if above or missed:
        parts = []
        if above:
            parts.append(f"{'' if exact else 'at least '}{above:,} of {n:,} wake-ups came later than the cycle time"
                         + late.why())
        if missed:
            parts.append(f"{plural(missed, 'period')} of {format_ns(interval_ns)} "
                         f"{'was' if missed == 1 else 'were'} missed entirely")
        return make("fail", f"fails {a_cyc} cycle: {' and '.join(parts)} (worst {_us(worst)}){note}",
                    margin=margin, above=above, exact=exact, at_most=None if exact else late.at_most)
    bound = 1 - 0.05 ** (1 / n)
    status = "tight" if margin < TIGHT_MARGIN else "pass"
    head = "passes, but tightly," if status == "tight" else "passes"
    sentence = (f"{head} for {a_cyc} cycle{note}: the worst of {n:,} wake-ups was {_us(worst)} late, "
                f"a margin of {_margin(margin)}; at 95 % confidence fewer than 1 in {math.floor(1 / bound):,} wake-ups "
                f"would be later than {cyc}")  # rounded down: 1 in 13.9 is not fewer than 1 in 14
    if status == "tight":
        sentence += " (more than half of each cycle can be lost to wake-up latency)"
    return make(status, sentence, margin=margin, bound=bound)


@dataclass
class Late:
    """Wake-ups later than the cycle time, counted thread by thread."""

    at_least: int = 0
    at_most: int = 0
    beyond: int = 0             # of them, samples beyond a histogram's range (their values lost)
    unkept: int = 0             # of them, samples of threads that kept no histogram at all

    @property
    def exact(self) -> bool:
        return self.at_least == self.at_most

    def why(self) -> str:
        """What makes the count a bound, in words ('' when it is exact)."""
        if self.exact:
            return ""
        if self.unkept and not self.beyond:
            return f" (at most {self.at_most:,}: no histogram was kept, only each thread's maximum is known)"
        if self.beyond:
            return (f" (at most {self.at_most:,}: {self.beyond:,} fell beyond the histogram, where only each "
                    "thread's maximum is known)")
        return f" (at most {self.at_most:,}: a histogram bucket spans the cycle time)"


def late_count(run: RunResult, cycle_ns: int) -> Late:
    """Wake-ups later than cycle_ns, from each thread's histogram and maximum.

    Per thread: none when its maximum is within the cycle; else the buckets
    wholly above count, a bucket straddling the cycle time and the samples
    beyond the histogram's range (when the cycle lies beyond it) may or may
    not, and the maximum itself was late: at least one.  Summed over the
    threads, so three threads whose maxima were late make "at least 3"."""
    late = Late()
    for c in run.cpus:
        if not c.count or (c.max_ns is not None and c.max_ns <= cycle_ns):
            continue
        h = c.hist
        sure = int(h.count[h.lo_ns > cycle_ns].sum())
        maybe = int(h.count[(h.lo_ns <= cycle_ns) & (h.hi_ns > cycle_ns)].sum())
        beyond = 0
        if h.overflow:
            if h.range_max_ns is not None and cycle_ns <= h.range_max_ns:
                sure += h.overflow
            else:
                beyond = h.overflow
        least = sure
        if c.max_ns is not None and c.max_ns > cycle_ns and least == 0:
            least = 1  # the maximum was late, wherever the histogram put it
        late.at_least += least
        late.at_most += max(least, sure + maybe + beyond)
        if h.kept:
            late.beyond += beyond
        else:
            late.unkept += beyond
    return late


def _us(ns: int) -> str:
    """Latencies in µs, as every table shows them."""
    return format_us(ns, unit=True)


def _margin(margin: float) -> str:
    """Never rounded onto or across a boundary of the rules (1: late, 2: tight)."""
    return format_ratio(margin, (1.0, TIGHT_MARGIN)) + ("" if margin == float("inf") else "×")


def _unknown_max(run: RunResult, cycle_ns: int, make) -> Verdict:
    """A run whose maximum is unknown (the blog CSV keeps only the histogram):
    the samples it kept can still prove a failure, never a pass."""
    hist = merged_histogram(run)
    above, _ = hist.count_above(cycle_ns)
    cyc = format_ns(cycle_ns)
    a_cyc = f"{article(cyc)} {cyc}"
    highest = int(hist.hi_ns[hist.count > 0].max()) if hist.in_range else None
    shown = f"the highest kept sample is {_us(highest)}" if highest is not None else "no sample was kept"
    if above:
        return make("fail", f"fails {a_cyc} cycle: at least {above:,} of {run_count(run):,} wake-ups came later "
                            f"than the cycle time ({shown}; the true maximum is unknown){_partial_note(run)}",
                    above=above, exact=False, worst_ns=None)
    return make("unknown", f"cannot be judged for {a_cyc} cycle: the run's maximum is unknown ({shown}), so "
                           "wake-ups later than the cycle time may have been lost; import the original cyclictest "
                           "output with its '#' lines", exact=False, worst_ns=None)


def run_count(run: RunResult) -> int:
    return summarize_all(run).count
