"""Latency plots of stored results (matplotlib, no pyplot state; SVG or PNG).

The OSADL latency plot is the one the real-time community reads: latency in
µs on the x axis, samples on a log y axis from 0.8, one step curve per CPU.
Probe histograms have log-linear buckets; they are spread uniformly over
1 µs bins here so curves from the probe and from cyclictest (whole
microseconds) look alike and compare.

The x axis is linear, as OSADL draws it, unless the tail would crush the
body: when the worst wake-up is more than TAIL_RATIO times the 99.9th
percentile, the x axis is logarithmic (docs/reports.md states the rule).
With a cycle time, a vertical line marks it.  The timeline is in
timeline.py.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..results.display import run_command
from ..results.hist import Histogram
from ..results.model import RunResult
from ..results.stats import merged_histogram, summarize_all
from .plotting import (  # noqa: F401
    CYCLE,
    EMULATED_NOTE,
    Figure,
    color,
    cycle_label,
    fmt_us,
    inline_svg,
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


def _top_us(hists: list[Histogram]) -> float:
    his = [h.hi_ns[h.count > 0].max() for h in hists if h.in_range]
    return (max(his) + 1) / 1000.0 * 1.02 + 1 if his else 10.0


class XAxis:
    """Where the latency axis runs: 0 to top (linear) or left to top (log)."""

    def __init__(self, hists: list[Histogram]):
        self.top = _top_us(hists)
        self.bin_us = _nice_bin_us(self.top)
        merged = hists[0]
        for h in hists[1:]:
            merged = merged.merged(h)
        kept = Histogram(merged.lo_ns, merged.hi_ns, merged.count)  # the drawn samples, overflow aside
        body = kept.quantile(Fraction(999, 1000))
        body_us = max((body or 0) / 1000.0, 1.0)
        self.log = self.top > TAIL_RATIO * body_us and kept.in_range > 0
        lowest = merged.lo_ns[merged.count > 0].min() / 1000.0 if merged.in_range else 1.0
        self.left = max(lowest * 0.8, self.bin_us / 2, 0.5) if self.log else 0.0

    def curve(self, hist: Histogram) -> tuple[np.ndarray, np.ndarray]:
        edges, counts = us_bins(hist, self.bin_us, self.top)
        if self.log:  # a log axis has no 0: start the steps at its left end
            keep = edges[1:] > self.left
            edges = np.append(np.maximum(edges[:-1][keep], self.left), edges[-1])
            counts = counts[keep]
        return collapse(edges, counts)

    def apply(self, ax) -> None:
        if self.log:
            ax.set_xscale("log")
            number_ticks(ax.xaxis)
        ax.set_xlim(self.left, self.top)
        ax.set_xlabel("latency (µs, log scale: the tail is long)" if self.log else "latency (µs)")
        ax.set_ylabel("samples" if self.bin_us == 1 else f"samples per {self.bin_us} µs")


def _cycle_x(ax, cycle_ns: int | None, axis: XAxis | None = None) -> None:
    if cycle_ns:
        ax.axvline(cycle_ns / 1000.0, color=CYCLE, linestyle="--", linewidth=1.2, label=cycle_label(cycle_ns),
                   zorder=4)
        if axis is not None and cycle_ns / 1000.0 > axis.top:
            ax.set_xlim(axis.left, cycle_ns / 1000.0 * 1.05)  # the line is drawn, not beyond the edge


def _log_counts(ax) -> None:
    """The OSADL log y axis from 0.8, spanning at least one decade."""
    ax.set_yscale("log")
    bottom, top = ax.get_ylim()
    ax.set_ylim(0.8, max(top, 10))
    power_ticks(ax.yaxis)


def _kept(hists: list[Histogram], what: str) -> None:
    if any(h.in_range for h in hists):
        return
    if any(h.kept and h.overflow for h in hists):
        raise NothingToPlot(f"{what} has every wake-up beyond its histogram's range (cyclictest -h too small, or "
                            "-N with a range in ns), so there is no curve to draw; `rtforge show` prints its min, "
                            "average and max")
    raise NothingToPlot(f"{what} kept no histogram (cyclictest ran without -h): only its min, average and max "
                        "are known, which `rtforge show` prints")


def latency_histogram(run: RunResult, cycle_ns: int | None = None) -> Figure:
    """The OSADL plot of one run: one step curve per CPU, the worst highlighted."""
    hists = [c.hist for c in run.cpus]
    _kept(hists, f"run {run.run_id}")
    axis = XAxis(hists)
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    maxes = [c.max_ns if c.max_ns is not None else -1 for c in run.cpus]
    worst = int(np.argmax(maxes)) if maxes else -1
    for i, c in enumerate(run.cpus):
        edges, counts = axis.curve(c.hist)
        label = f"{cpu_name(run, c.cpu)}: max {fmt_us(c.max_ns)} µs"
        if c.hist.overflow:
            label += f" ({c.hist.overflow:,} beyond the histogram)"
        ax.stairs(counts, edges, label=label + (" — worst" if i == worst else ""),
                  linewidth=2.2 if i == worst else 1.0, color=color(i, worst), zorder=3 if i == worst else 2)
    _log_counts(ax)
    axis.apply(ax)
    _cycle_x(ax, cycle_ns, axis)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title(run), fontsize=10)
    command, trusted = run_command(run)
    command = plain(command if trusted or not command else f"the file's command line: {command}", 400)
    if command:
        fig.text(0.01, 0.005, command, fontsize=7, family="monospace", color="#444", va="bottom")
    fig.set_layout_engine("constrained", h_pad=0.25)
    return fig


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
    One curve per CPU for a single run, one per run (all CPUs) for several."""
    curves = (
        [(cpu_name(runs[0], c.cpu), c.hist, c.max_ns) for c in runs[0].cpus]
        if len(runs) == 1
        else [(plain(r.label or r.run_id), merged_histogram(r), r.max_ns) for r in runs]
    )
    _kept([h for _, h, _ in curves], "none of these runs" if len(runs) > 1 else f"run {runs[0].run_id}")
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    for name, hist, max_ns in curves:
        x, y = _exceedance(hist, max_ns)
        keep = (y > 0) & (x > 0)
        (line,) = ax.step(x[keep], y[keep], where="post", label=f"{name}: max {fmt_us(max_ns)} µs")
        if hist.overflow and hist.range_max_ns is not None and hist.range_max_ns >= 0:
            ax.plot([(hist.range_max_ns + 1) / 1000.0], [hist.overflow / hist.total], marker="o",
                    color=line.get_color(), label=f"{name}: {hist.overflow:,} beyond the histogram")
    ax.set_xscale("log")
    ax.set_yscale("log")
    number_ticks(ax.xaxis)
    power_ticks(ax.yaxis)
    _cycle_x(ax, cycle_ns)
    ax.set_xlabel("latency x (µs)")
    ax.set_ylabel("fraction of wake-ups later than x")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title(runs[0]) if len(runs) == 1 else "exceedance, all CPUs of each run", fontsize=10)
    return fig


def compare_overlay(runs: list[RunResult], cycle_ns: int | None = None) -> Figure:
    """Several runs on one OSADL-style axis, all CPUs of each run together."""
    hists = [merged_histogram(r) for r in runs]
    _kept(hists, "none of these runs")
    axis = XAxis(hists)
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    for r, h in zip(runs, hists):
        if not h.in_range:
            continue  # a run with no histogram has no curve; the comparison table shows its figures
        edges, counts = axis.curve(h)
        s = summarize_all(r)
        ax.stairs(counts, edges, linewidth=1.3,
                  label=plain(f"{r.label or r.run_id} ({r.system.get('preempt_model') or '?'}): "
                              f"max {fmt_us(s.max_ns)} µs"))
    _log_counts(ax)
    axis.apply(ax)
    _cycle_x(ax, cycle_ns, axis)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("latency histograms compared (all CPUs of each run)", fontsize=10)
    return fig
