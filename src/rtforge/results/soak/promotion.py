"""A board's soak history across days and kernels, and the promotion rule.

OSADL's farm calls a kernel stable only after a month without a crash and
without an RT regression against the one before.  The rule rtforge applies
(docs/monitoring.md), with its defaults:

    kernel B is promoted when it has run N days (30) over M windows (8000)
    with no unclean restart, and shows no regression against kernel A, the
    kernel before it: B's p99.99 and B's max each at most A's + 10 %.

Days count from B's first window to its last; windows are B's closed
windows; an unclean restart is a gap whose previous life did not record
its stop (a crash, a power loss, a watchdog); p99.99 and max are over every
wake-up of every CPU in B's windows.  Before N days and M windows B is
"waiting" (with what is missing), never promoted early; a regression is a
regression whenever it shows.

"The kernel before it" is the last kernel that was *promoted* (the first
kernel seen is the baseline), never merely the previous one: a chain of
kernels each 9 % worse than the one before would otherwise drift without
a regression ever showing.  And the two are compared over equal spans:
the reference's figures over as many days from its first window as B has
run (a month of maxima is larger than a week's, by chance alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from ...units import format_span, format_us
from ..hist import Histogram
from .windows import P9999, Rollup, Window, merged_histogram

DAY_NS = 86400 * 1_000_000_000


@dataclass
class Rule:
    min_days: float = 30.0
    min_windows: int = 8000
    margin: float = 0.10

    def text(self) -> str:
        seconds = round(self.min_days * 86400)
        days = f"{seconds // 86400} days" if seconds % 86400 == 0 else format_span(seconds)
        return (f"a kernel is promoted after {days} and {self.min_windows:,} windows with no "
                f"unclean restart and no regression against the kernel before it: its p99.99 and its max each "
                f"at most {self.margin * 100:g} % above that kernel's")


@dataclass
class KernelSpan:
    release: str
    version: str
    label: str                  # release, made unique when two builds share it
    first_ns: int
    last_ns: int
    windows: int = 0
    covered_ns: int = 0
    alerts: int = 0
    unclean: int = 0            # unclean restarts of its lives
    p9999_ns: int | None = None
    max_ns: int | None = None
    samples: int = 0
    hist: Histogram | None = None
    window_max_ns: list[int] = field(default_factory=list)
    # what its figures come from, for the figures over a shorter span (figures())
    maxima: list[tuple[int, int]] = field(default_factory=list, repr=False)    # (window start, its max)
    dist: list[Window | Rollup] = field(default_factory=list, repr=False)

    @property
    def days(self) -> float:
        return (self.last_ns - self.first_ns) / DAY_NS

    def figures(self, until_ns: int | None = None) -> tuple[int | None, int | None]:
        """(p99.99, max) over the windows that started before until_ns (None: all of them)."""
        if until_ns is None or until_ns >= self.last_ns:
            return self.p9999_ns, self.max_ns
        hist, lo, hi = merged_histogram(x for x in self.dist if x.start_ns < until_ns)
        mx = max((m for t, m in self.maxima if t < until_ns), default=hi)
        return hist.quantile(P9999, lo, hi), mx


@dataclass
class Verdict:
    status: str                 # promoted | waiting | regression | baseline | none
    candidate: KernelSpan | None
    reference: KernelSpan | None
    line: str                   # "kernel B: N days, M windows, ... : promoted"
    missing: list[str] = field(default_factory=list)


def kernel_spans(windows: list[Window], rollups: list[Rollup] | None, events: list[dict]) -> list[KernelSpan]:
    """One span per kernel (uname -r and -v), in the order they first ran.
    Distributions come from the hours when given (one record per hour and
    life, unmerged: read_rollups(..., merged=False); they hold every
    histogram in 1/12 of the room), else from the windows' histograms."""
    spans: dict[tuple[str, str], KernelSpan] = {}
    life_kernel: dict[str, tuple[str, str]] = {}
    for w in windows:
        k = (w.kernel, w.kver)
        life_kernel[w.life] = k
        s = spans.get(k)
        if s is None:
            s = spans[k] = KernelSpan(w.kernel, w.kver, w.kernel, w.start_ns, w.end_ns)
        s.first_ns, s.last_ns = min(s.first_ns, w.start_ns), max(s.last_ns, w.end_ns)
        s.windows += 1
        s.covered_ns += w.end_ns - w.start_ns
        s.alerts += w.alert is not None
        if w.max_ns is not None:
            s.window_max_ns.append(w.max_ns)
            s.maxima.append((w.start_ns, w.max_ns))
    for e in events:
        if e.get("event") == "gap" and e.get("clean") is False and e.get("life_before") in life_kernel:
            spans[life_kernel[e["life_before"]]].unclean += 1
    by_kernel: dict[tuple[str, str], list] = {k: [] for k in spans}
    for r in rollups or []:  # one record per life: one kernel each
        if len(r.kernels) == 1 and r.kernels[0] in by_kernel:
            by_kernel[r.kernels[0]].append(r)
    for w in windows:
        if not rollups and w.cpus and any(c.buckets for c in w.cpus):
            by_kernel[(w.kernel, w.kver)].append(w)
    releases = [k[0] for k in spans]
    for k, s in spans.items():
        if releases.count(k[0]) > 1:
            s.label = f"{k[0]} ({k[1][:32]})"
        s.dist = by_kernel[k]
        hist, lo, hi = merged_histogram(s.dist)
        s.hist, s.samples = hist, hist.total
        s.p9999_ns = hist.quantile(P9999, lo, hi)
        s.max_ns = max(s.window_max_ns, default=hi)
    return sorted(spans.values(), key=lambda s: s.first_ns)


def changes(windows: list[Window]) -> list[tuple[int, str, str]]:
    """(time, from, to) of each kernel change, as the windows show it."""
    out = []
    for a, b in zip(windows, windows[1:]):
        if (a.kernel, a.kver) != (b.kernel, b.kver):
            out.append((b.start_ns, a.kernel, b.kernel))
    return out


def gaps(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("event") == "gap" and isinstance(e.get("from_ns"), int)
            and isinstance(e.get("to_ns"), int)]


def _us(ns: int | None) -> str:
    return format_us(ns, unit=True, unknown="?")


def evaluate(spans: list[KernelSpan], rule: Rule) -> Verdict:
    """The rule applied to the newest kernel (B) against the last kernel
    promoted before it (A: the baseline, the first kernel seen, until
    another is promoted)."""
    if not spans:
        return Verdict("none", None, None, "no windows yet")
    reference = spans[0]
    verdict = Verdict("baseline", spans[0], None, "")
    for b in spans[1:]:
        verdict = _judge(b, reference, rule)
        if verdict.status == "promoted":
            reference = b
    if len(spans) == 1:
        return _judge(spans[0], None, rule)
    return verdict


def _judge(b: KernelSpan, a: KernelSpan | None, rule: Rule) -> Verdict:
    head = f"kernel {b.label}: {b.days:.1f} days, {b.windows:,} windows"
    missing = []
    if b.days < rule.min_days:
        missing.append(f"{rule.min_days - b.days:.1f} more days")
    if b.windows < rule.min_windows:
        missing.append(f"{rule.min_windows - b.windows:,} more windows")
    if b.unclean:
        missing.append(f"{b.unclean} unclean restart{'s' if b.unclean > 1 else ''}")
    if a is None:
        return Verdict("baseline", b, None, f"{head}, the first kernel seen: the reference for the next one", missing)
    # the reference over as long a span as B has run: maxima grow with the time measured
    until = a.first_ns + (b.last_ns - b.first_ns)
    a_p9999, a_max = a.figures(until)
    over = "" if until >= a.last_ns else f" over its first {b.days:.1f} days"
    limit = Fraction(str(1 + rule.margin))
    worse = []
    for name, vb, va in (("p99.99", b.p9999_ns, a_p9999), ("max", b.max_ns, a_max)):
        if vb is not None and va is not None and Fraction(vb) > Fraction(va) * limit:
            worse.append(f"{name} {_us(vb)} > {_us(va)} + {rule.margin * 100:g} %")
    compared = (f"p99.99 {_us(b.p9999_ns)} vs {_us(a_p9999)}, max {_us(b.max_ns)} vs {_us(a_max)} "
                f"of kernel {a.label}{over}")
    if worse:
        return Verdict("regression", b, a, f"{head}, regression against kernel {a.label}{over}: {'; '.join(worse)}",
                       missing)
    if b.unclean:
        return Verdict("waiting", b, a, f"{head}, {compared}: not promoted ({missing[-1]})", missing)
    if missing:
        return Verdict("waiting", b, a, f"{head}, no regression so far ({compared}): needs {', '.join(missing)}",
                       missing)
    return Verdict("promoted", b, a, f"{head}, no regression against kernel {a.label} at the p99.99 and max "
                                     f"({compared}): promoted", [])


def limits(verdict: Verdict, rule: Rule) -> dict[str, int]:
    """What the newest kernel may reach and still be promoted: the reference's
    p99.99 and max (over the compared span) plus the margin, in ns."""
    a, b = verdict.reference, verdict.candidate
    if a is None or b is None:
        return {}
    p9999, mx = a.figures(a.first_ns + (b.last_ns - b.first_ns))
    return {k: round(v * (1 + rule.margin)) for k, v in (("p99.99", p9999), ("max", mx)) if v is not None}
