"""Latency plots of stored results (matplotlib, no pyplot state; SVG or PNG).

The OSADL latency plot is the one the real-time community reads: latency in
µs on the x axis, samples on a log y axis from 0.8, one step curve per CPU.
Probe histograms have log-linear buckets; they are spread uniformly over
1 µs bins here so curves from the probe and from cyclictest (whole
microseconds) look alike and compare.

The x axis is linear, as OSADL draws it, unless the tail would crush the
body: when a run's worst kept wake-up is more than TAIL_RATIO times its
99.9th percentile, the x axis is logarithmic, and the axis label says so.
The rule is applied once to all the runs of a report (`long_tail`), so its
histograms share one scale (docs/measuring.md states the rule).  A cycle
time is a line when it lies near the data, else an arrow at the edge
(plotting.mark_cycle).  The timeline is in timeline.py.
"""

from __future__ import annotations

import math
import textwrap
from fractions import Fraction

import numpy as np

from ..results.display import run_command
from ..results.hist import Histogram
from ..results.model import RunResult
from ..results.stats import merged_histogram, summarize_all
from .plotting import (  # noqa: F401
    CYCLE,
    EMULATED_NOTE,
    SMALL,
    Figure,
    color,
    cycle_label,
    fmt_us,
    inline_svg,
    legend_above,
    linear_ticks,
    mark_cycle,
    number_ticks,
    plain,
    power_ticks,
    render,
    title,
)
from .timeline import MAX_POINTS, timeline  # noqa: F401  (one place to import every plot from)

MAX_BINS = 20_000       # x resolution of histogram plots
TAIL_RATIO = 10         # log x axis when max > TAIL_RATIO × p99.9


class NothingToPlot(ValueError):
    """The runs kept no histogram: there is no curve to draw."""


def _nice_bin_us(top_us: float) -> int:
    for step in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000):
        if top_us / step <= MAX_BINS:
            return step
    return math.ceil(top_us / MAX_BINS)


def us_bins(hist: Histogram, bin_us: int, top_us: float) -> tuple[np.ndarray, np.ndarray]:
    """Counts per bin_us-wide bin from 0 to top_us (exact for cyclictest's
    1 µs buckets).

    A probe bucket at least a bin wide is spread evenly over its range when it
    holds at least two samples per bin (the body of the distribution: a smooth
    curve, no comb); any other bucket keeps its whole count in the bin of its
    midpoint, so every rare sample of the tail stays visible above the 0.8
    floor (placed within half a bucket, <= 0.8 % of its value)."""
    edges = np.arange(0, top_us + bin_us, bin_us, dtype=float)
    counts = np.zeros(len(edges) - 1)
    if hist.in_range == 0:
        return edges, counts
    lo = hist.lo_ns / 1000.0
    hi = (hist.hi_ns + 1) / 1000.0      # exclusive
    width_bins = (hi - lo) / bin_us
    # >= 2 samples per bin guarantees every bin the bucket overlaps most gets >= 1
    dense = (width_bins >= 1) & (hist.count >= 2 * width_bins)
    if dense.any():
        # Piecewise-linear cumulative count: flat between buckets, linear inside.
        c = hist.count[dense]
        cum = np.cumsum(c).astype(float)
        xs = np.column_stack([lo[dense], hi[dense]]).ravel()
        ys = np.column_stack([cum - c, cum]).ravel()
        counts += np.diff(np.interp(edges, xs, ys))
    sparse = ~dense
    if sparse.any():
        mid = (lo[sparse] + hi[sparse]) / 2
        idx = np.minimum((mid // bin_us).astype(np.int64), len(counts) - 1)
        np.add.at(counts, idx, hist.count[sparse])
    return edges, counts


def collapse(edges: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same step curve with one step per change of value: the long empty
    stretches of a tail cost nothing to draw."""
    keep = np.concatenate([[True], counts[1:] != counts[:-1]])
    return np.append(edges[:-1][keep], edges[-1]), counts[keep]


def _highest_us(hists: list[Histogram]) -> float | None:
    """The end of the highest bucket that holds a sample (µs), None when none does."""
    his = [h.hi_ns[h.count > 0].max() for h in hists if h.in_range]
    return (max(his) + 1) / 1000.0 if his else None


def _tail_is_long(hist: Histogram) -> bool:
    kept = Histogram(hist.lo_ns, hist.hi_ns, hist.count)  # the drawn samples, overflow aside
    if not kept.in_range:
        return False
    body_us = max((kept.quantile(Fraction(999, 1000)) or 0) / 1000.0, 1.0)
    return (_highest_us([kept]) or 0) > TAIL_RATIO * body_us


def long_tail(runs: list[RunResult]) -> bool:
    """The one rule for the OSADL plots' x axis: logarithmic when any run's
    worst kept wake-up is more than TAIL_RATIO times its own p99.9 (the
    body would be a sliver at the left of a linear axis), else linear.  A
    report decides it once for all its runs, so its histograms agree."""
    return any(_tail_is_long(merged_histogram(r)) for r in runs)


class XAxis:
    """Where the latency axis runs: 0 to top (linear) or left to top (log);
    top leaves a margin past the worst sample, which is never drawn on the frame."""

    MARGIN = 0.04   # of the axis' length (of its decades on a log axis)

    def __init__(self, hists: list[Histogram], log: bool):
        merged = hists[0]
        for h in hists[1:]:
            merged = merged.merged(h)
        highest = _highest_us(hists) or 10.0
        self.log = log and merged.in_range > 0
        lowest = merged.lo_ns[merged.count > 0].min() / 1000.0 if merged.in_range else 1.0
        self.left = max(lowest * 0.8, 0.5) if self.log else 0.0
        self.top = highest * (highest / self.left) ** self.MARGIN if self.log else highest * (1 + self.MARGIN) + 1
        self.bin_us = _nice_bin_us(self.top)
        if self.log:
            self.left = max(self.left, self.bin_us / 2)
        self.data_top = highest

    def curve(self, hist: Histogram) -> tuple[np.ndarray, np.ndarray]:
        edges, counts = us_bins(hist, self.bin_us, self.top)
        if self.log:  # a log axis has no 0: start the steps at its left end
            keep = edges[1:] > self.left
            edges = np.append(np.maximum(edges[:-1][keep], self.left), edges[-1])
            counts = counts[keep]
        return collapse(edges, counts)

    def apply(self, ax, cycle_ns: int | None) -> None:
        if self.log:
            ax.set_xscale("log")
            number_ticks(ax.xaxis, math.log10(self.top / self.left))
        else:
            linear_ticks(ax.xaxis)
        ax.set_xlim(self.left, self.top)
        ax.set_xlabel("latency (µs, log scale: the tail is long)" if self.log else "latency (µs)")
        ax.set_ylabel("samples" if self.bin_us == 1 else f"samples per {self.bin_us} µs")
        if cycle_ns:
            mark_cycle(ax, cycle_ns, self.data_top, log=self.log)


def _log_counts(ax) -> None:
    """The OSADL log y axis from 0.8, spanning at least one decade."""
    ax.set_yscale("log")
    bottom, top = ax.get_ylim()
    ax.set_ylim(0.8, max(top, 10))
    power_ticks(ax.yaxis)


def _kept(hists: list[Histogram], what: str) -> None:
    if any(h.in_range for h in hists):
        return
    if what == "none of these runs":
        raise NothingToPlot("none of these runs kept a histogram (cyclictest ran without -h, or every wake-up fell "
                            "beyond its range), so there is no curve to draw; `rtforge compare` prints their min, "
                            "average and max")
    if any(h.kept and h.overflow for h in hists):
        raise NothingToPlot(f"{what} has every wake-up beyond its histogram's range (cyclictest -h too small, or "
                            "-N with a range in ns), so there is no curve to draw; `rtforge show` prints its min, "
                            "average and max")
    raise NothingToPlot(f"{what} kept no histogram (cyclictest ran without -h): only its min, average and max "
                        "are known, which `rtforge show` prints")


def _max_text(max_ns: int | None, hist: Histogram) -> str:
    """'max 84.0 µs'; a file that kept no maximum (the blog CSV) says so and
    gives its highest kept sample, a lower bound of it."""
    if max_ns is not None:
        return f"max {fmt_us(max_ns)} µs"
    if not hist.in_range:
        return "max unknown"
    # the top of the highest bucket holding a sample, as the verdict names it
    return f"max unknown, highest kept {fmt_us(int(hist.hi_ns[hist.count > 0].max()))} µs"


def _worst_of(cpus) -> int:
    """The CPU with the worst wake-up: by its max, else by its highest kept sample."""
    keys = [(c.max_ns if c.max_ns is not None else -1, _highest_us([c.hist]) or -1) for c in cpus]
    return max(range(len(keys)), key=lambda i: keys[i]) if keys else -1


def _command_text(fig, run: RunResult) -> None:
    """The reproducer under the axis, wrapped to the figure's width at a size that stays legible at 800 px."""
    command, trusted = run_command(run)
    command = plain(command if trusted or not command else f"the file's command line: {command}", 400)
    if command:
        width = int(fig.get_figwidth() * 72 / (0.62 * SMALL))   # monospace: about 0.6 em a character
        # a figure-level label: the layout keeps room for all its lines under the axis' own label
        fig.supxlabel("\n".join(textwrap.wrap(command, width, break_on_hyphens=False)), x=0.01, ha="left",
                      fontsize=SMALL, family="monospace", color="#444")


def latency_histogram(run: RunResult, cycle_ns: int | None = None, log: bool | None = None) -> Figure:
    """The OSADL plot of one run: one step curve per CPU, the worst
    highlighted.  log: the x scale a report chose for all its runs (None:
    long_tail of this run alone)."""
    hists = [c.hist for c in run.cpus]
    _kept(hists, f"run {run.run_id}")
    axis = XAxis(hists, long_tail([run]) if log is None else log)
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    worst = _worst_of(run.cpus)
    for i, c in enumerate(run.cpus):
        edges, counts = axis.curve(c.hist)
        label = f"{cpu_name(run, c.cpu)}: {_max_text(c.max_ns, c.hist)}"
        if c.hist.overflow:
            label += f" ({c.hist.overflow:,} beyond the histogram)"
        ax.stairs(counts, edges, label=label + (" — worst" if i == worst and len(run.cpus) > 1 else ""),
                  linewidth=2.2 if i == worst else 1.0, color=color(i, worst), zorder=3 if i == worst else 2)
    _log_counts(ax)
    axis.apply(ax, cycle_ns)
    ax.grid(True, which="major", alpha=0.3)
    legend_above(ax, ncol=2)
    fig.suptitle(title(run), fontsize=10)  # above the legend, which stands above the axes
    _command_text(fig, run)
    return fig


def with_histogram(runs: list[RunResult]) -> tuple[list[RunResult], list[str]]:
    """The runs that kept samples in a histogram, and one line naming each
    of the others: a plot of several runs draws the first and says the rest."""
    kept, lines = [], []
    for r in runs:
        if any(c.hist.in_range for c in r.cpus):
            kept.append(r)
        else:
            try:
                _kept([c.hist for c in r.cpus], f"{r.label or r.run_id} ({r.run_id})" if r.label else r.run_id)
            except NothingToPlot as e:
                lines.append(f"not in the plot: {e}")
    return kept, lines


def cpu_name(run: RunResult, cpu: int) -> str:
    """'CPU 2', or 'thread 2' for an import whose threads' CPUs are unknown."""
    return f"thread {cpu}" if run.config.get("cpu_is_thread") else f"CPU {cpu}"


def _exceedance(hist: Histogram, max_ns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """x (µs), fraction of all samples above x, for a step plot (each level
    held to the next x): from the fastest wake-up to the worst one."""
    n = hist.total
    filled = np.flatnonzero(hist.count) if hist.in_range and n else np.zeros(0, dtype=int)
    if not filled.size:
        return np.zeros(0), np.zeros(0)
    # from the first bucket that holds a sample: below it the curve is 1, and
    # empty buckets from 0 would stretch a log axis over decades of nothing
    f = filled[0]
    above = (n - np.cumsum(hist.count)) / n
    x = np.concatenate([[hist.lo_ns[f] / 1000.0], (hist.hi_ns[f:] + 1) / 1000.0])
    y = np.concatenate([[1.0], above[f:]])
    last = int(np.flatnonzero(y > 0)[-1])
    if last + 1 < len(y):
        # the last level (the worst wake-ups' share) is drawn out to the worst
        # wake-up: a step ends at its next point, and a level of 0 has none on a log axis
        end = x[last + 1] if max_ns is None else max(max_ns / 1000.0, x[last])
        return np.append(x[: last + 1], end), np.append(y[: last + 1], y[last])
    return x, y


def exceedance(runs: list[RunResult], cycle_ns: int | None = None) -> Figure:
    """Fraction of wake-ups later than x (log-log): the tail, read directly.
    One curve per CPU for a single run, one per run (all CPUs) for several;
    a run without a histogram has no curve and no legend entry
    (with_histogram names it)."""
    kept, _ = with_histogram(runs)
    if len(runs) == 1 or not kept:
        what = "none of these runs" if len(runs) > 1 else f"run {runs[0].run_id}"
        _kept([c.hist for r in runs for c in r.cpus], what)
    # a CPU keeps the colour the histogram gives it (the worst one highlighted the same way), so
    # the two plots of a run are read together; several runs take the palette in their order
    if len(runs) == 1:
        run, worst = kept[0], _worst_of(kept[0].cpus)
        curves = [(cpu_name(run, c.cpu), c.hist, c.max_ns, color(i, worst), 2.2 if i == worst else 1.2,
                   " — worst" if i == worst and len(run.cpus) > 1 else "")
                  for i, c in enumerate(run.cpus) if c.hist.in_range]
    else:
        curves = [(plain(r.label or r.run_id), merged_histogram(r), r.max_ns, color(i, -1), 1.2, "")
                  for i, r in enumerate(kept)]
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    lowest, right = 1.0, 1.0
    for name, hist, max_ns, colour, width, note in curves:
        x, y = _exceedance(hist, max_ns)
        keep = (y > 0) & (x > 0)
        (line,) = ax.step(x[keep], y[keep], where="post", label=f"{name}: {_max_text(max_ns, hist)}{note}",
                          color=colour, linewidth=width)
        if keep.any():
            lowest, right = min(lowest, y[keep].min()), max(right, x[keep].max())
        if hist.overflow and hist.range_max_ns is not None and hist.range_max_ns >= 0:
            ax.plot([(hist.range_max_ns + 1) / 1000.0], [hist.overflow / hist.total], marker="o",
                    color=line.get_color(), label=f"{name}: {hist.overflow:,} beyond the histogram")
            lowest = min(lowest, hist.overflow / hist.total)
    ax.set_xscale("log")
    ax.set_yscale("log")
    # the rarest level and the worst wake-up half a decade (a tenth of one) inside the frame, never on it
    ax.set_ylim(lowest / 3, 1.6)
    ax.set_xlim(right=right * 1.3)
    left, _ = ax.get_xlim()
    number_ticks(ax.xaxis, math.log10(right * 1.3 / left))
    power_ticks(ax.yaxis)
    if cycle_ns:
        mark_cycle(ax, cycle_ns, right, log=True)
    ax.set_xlabel("latency x (µs)")
    ax.set_ylabel("fraction of wake-ups later than x")
    ax.grid(True, which="major", alpha=0.3)
    legend_above(ax, ncol=2)
    fig.suptitle(title(runs[0]) if len(runs) == 1 else "exceedance, all CPUs of each run", fontsize=10)
    return fig


def compare_overlay(runs: list[RunResult], cycle_ns: int | None = None, log: bool | None = None) -> Figure:
    """Several runs on one OSADL-style axis, all CPUs of each run together;
    a run without a histogram is left out (with_histogram names it)."""
    kept, _ = with_histogram(runs)
    if not kept:
        _kept([merged_histogram(r) for r in runs], "none of these runs")
    hists = [merged_histogram(r) for r in kept]
    axis = XAxis(hists, long_tail(kept) if log is None else log)
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    for i, (r, h) in enumerate(zip(kept, hists)):
        edges, counts = axis.curve(h)
        s = summarize_all(r)
        ax.stairs(counts, edges, linewidth=1.3, color=color(i, -1),   # as in the exceedance plot beside it
                  label=plain(f"{r.label or r.run_id} ({r.system.get('preempt_model') or '?'}): "
                              f"{_max_text(s.max_ns, h)}"))
    _log_counts(ax)
    axis.apply(ax, cycle_ns)
    ax.grid(True, which="major", alpha=0.3)
    legend_above(ax, ncol=2)
    fig.suptitle("latency histograms compared (all CPUs of each run)", fontsize=10)
    return fig
