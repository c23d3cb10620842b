"""Plots of stored results (matplotlib, no pyplot state; SVG or PNG).

The OSADL latency plot is the one the real-time community reads: latency in
µs on a linear x axis, samples on a log y axis from 0.8, one step curve per
CPU.  Probe histograms have log-linear buckets; they are spread uniformly
over 1 µs bins here so curves from the probe and from cyclictest (whole
microseconds) look alike and compare.
"""

from __future__ import annotations

import io
import math

import matplotlib
import numpy as np

from ..results.display import clean
from ..results.hist import Histogram
from ..results.model import RunResult
from ..results.stats import merged_histogram, summarize_all

matplotlib.use("Agg")  # no display, ever
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVG
# Labels come from users and files: '$' must be a dollar sign, not TeX to parse (a bad one raises).
matplotlib.rcParams["text.parse_math"] = False

from matplotlib.figure import Figure  # noqa: E402

MAX_BINS = 20_000       # x resolution of histogram plots
MAX_POINTS = 2_000      # per line in time series: max-pooled beyond that
WORST = "#d62728"
# tab10 without its red, which marks the worst CPU
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _color(i: int, worst: int) -> str:
    return WORST if i == worst else PALETTE[i % len(PALETTE)]
EMULATED_NOTE = "emulated (QEMU): latencies are emulation noise, not the hardware's"


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
    his = [h.hi_ns.max() for h in hists if h.hi_ns.size]
    return (max(his) + 1) / 1000.0 * 1.02 + 1 if his else 10.0


def _title(run: RunResult) -> str:
    s = run.system
    name = run.label or run.run_id
    parts = [name, f"kernel {s.get('kernel_release', '?')}", f"preemption {s.get('preempt_model', '?')}"]
    if run.config.get("loads"):
        parts.append("load " + ",".join(run.config["loads"]))
    title = clean(" · ".join(parts))[:300]  # no control character may reach the SVG (invalid XML)
    if run.config.get("emulated"):
        title += "\n" + EMULATED_NOTE
    return title


def _fmt_us(ns) -> str:
    return "?" if ns is None else f"{ns / 1000:.1f}"


def latency_histogram(run: RunResult) -> Figure:
    """The OSADL plot of one run: one step curve per CPU, the worst highlighted."""
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    hists = [c.hist for c in run.cpus]
    top = _top_us(hists)
    bin_us = _nice_bin_us(top)
    maxes = [c.max_ns if c.max_ns is not None else -1 for c in run.cpus]
    worst = int(np.argmax(maxes)) if maxes else -1
    for i, c in enumerate(run.cpus):
        edges, counts = collapse(*us_bins(c.hist, bin_us, top))
        label = f"CPU {c.cpu}: max {_fmt_us(c.max_ns)} µs"
        if c.hist.overflow:
            label += f" ({c.hist.overflow:,} beyond the histogram)"
        ax.stairs(counts, edges, label=label + (" — worst" if i == worst else ""),
                  linewidth=2.2 if i == worst else 1.0, color=_color(i, worst), zorder=3 if i == worst else 2)
    _log_counts(ax, any(c.hist.in_range for c in run.cpus))
    ax.set_xlim(0, top)
    ax.set_xlabel("latency (µs)")
    ax.set_ylabel("samples" if bin_us == 1 else f"samples per {bin_us} µs")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(_title(run), fontsize=10)
    command = clean(run.reproducer or " ".join(run.engine_argv))
    if command:
        fig.text(0.01, 0.005, command, fontsize=7, family="monospace", color="#444", va="bottom")
    fig.get_layout_engine().set(h_pad=0.25)
    return fig


def _log_counts(ax, any_samples: bool) -> None:
    """The OSADL log y axis from 0.8; with no sample in any histogram (status
    lines only) a fixed range and a note, since log axes cannot autoscale to nothing."""
    if any_samples:
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.8)
    else:
        ax.set_ylim(0.8, 10)  # before the log scale, which cannot autoscale to nothing
        ax.set_yscale("log")
        ax.text(0.5, 0.5, "no histogram was kept (cyclictest without -h): only min, average and max are known",
                ha="center", va="center", transform=ax.transAxes, color="#777")


def _pool_max(t: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max-pool a series down to MAX_POINTS so a 24 h run stays drawable and
    no peak is lost (a mean would hide exactly what matters)."""
    n = len(t)
    if n <= MAX_POINTS:
        return t, values
    k = math.ceil(n / MAX_POINTS)
    pad = (-n) % k
    v = np.concatenate([values, np.full(pad, np.nan)]).reshape(-1, k)
    tt = np.concatenate([t, np.full(pad, t[-1])]).reshape(-1, k)
    with np.errstate(all="ignore"):
        pooled = np.where(np.all(np.isnan(v), axis=1), np.nan, np.nanmax(np.where(np.isnan(v), -np.inf, v), axis=1))
    return tt[:, 0], pooled


def _time_unit(span_s: float) -> tuple[float, str]:
    if span_s < 600:
        return 1.0, "s"
    if span_s < 10 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


def _throttled_spans(tel: dict) -> list[tuple[float, float]]:
    """Time spans in which the firmware reported a live throttling bit."""
    spans = []
    t = tel.get("t_s") or []
    thr = tel.get("throttled") or []
    start = None
    for ts, v in zip(t, thr):
        live = v is not None and v & 0xF
        if live and start is None:
            start = ts
        elif not live and start is not None:
            spans.append((start, ts))
            start = None
    if start is not None and t:
        spans.append((start, t[-1]))
    return spans


def _series_values(col: list, div: float = 1.0) -> np.ndarray:
    return np.asarray([np.nan if x is None else x / div for x in col], dtype=float)


def _interrupts(ax, run: RunResult, t: np.ndarray, scale: float, worst: int) -> None:
    """Interrupts per second on each CPU, and the irq/ threads' CPU use on a
    twin axis: the IRQ burst (a USB or network storm, the dwc_otg case) drawn
    under the latency spike it causes."""
    series = run.series
    handles = []
    for i, (cpu, col) in enumerate(zip(series["cpus"], series["irqs"])):
        tp, vp = _pool_max(t, _series_values(col))
        handles += ax.plot(tp / scale, vp, linewidth=1.4 if i == worst else 0.8, color=_color(i, worst),
                           label=f"CPU {cpu} interrupts/s")
    ax.set_ylabel("interrupts per second")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    pct = series.get("irq_thread_pct")
    if pct and any(v is not None for v in pct):
        axt = ax.twinx()
        tp, vp = _pool_max(t, _series_values(pct))
        handles += axt.plot(tp / scale, vp, color="#9467bd", linewidth=0.9, linestyle="--",
                            label="irq/ threads (% of one CPU)")
        axt.set_ylabel("irq/ threads' CPU (%)")
        axt.set_ylim(bottom=0)
    ax.legend(handles=handles, loc="upper left", fontsize=7, ncol=3)


def timeline(run: RunResult) -> Figure | None:
    """Per-second max per CPU over time, with the interrupts per second (when
    the probe counted them), temperature and CPU frequency below and
    throttling shaded; None for runs without a per-second series."""
    series = run.series
    if not series or not series.get("t_s"):
        return None
    t = np.asarray(series["t_s"], dtype=float)
    tel = run.telemetry or {}
    span = max(t[-1], (tel.get("t_s") or [0])[-1]) if len(t) else 1.0
    scale, unit = _time_unit(span)
    irqs = bool(series.get("irqs")) and any(v is not None for col in series["irqs"] for v in col)
    fig = Figure(figsize=(10, 8.4 if irqs else 6.4), layout="constrained")
    panels = fig.subplots(3 if irqs else 2, 1, sharex=True, height_ratios=[3, 1.6, 2] if irqs else [3, 2])
    ax, ax2 = panels[0], panels[-1]
    maxes = [max((v for v in col if v is not None), default=-1) for col in series["max_ns"]]
    worst = int(np.argmax(maxes)) if maxes else -1
    for i, (cpu, col) in enumerate(zip(series["cpus"], series["max_ns"])):
        tp, vp = _pool_max(t, _series_values(col, 1000.0))
        ax.plot(tp / scale, vp, linewidth=1.6 if i == worst else 0.9, color=_color(i, worst),
                label=f"CPU {cpu}: max {_fmt_us(maxes[i])} µs")
    ax.set_ylabel("max latency per second (µs)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(_title(run), fontsize=10)
    if irqs:
        _interrupts(panels[1], run, t, scale, worst)
    tt = np.asarray(tel.get("t_s") or [], dtype=float)
    handles = []
    for name, col in (tel.get("temp_mc") or {}).items():
        tp, vp = _pool_max(tt, _series_values(col, 1000.0))
        handles += ax2.plot(tp / scale, vp, color="#ff7f0e", linewidth=1.0, label=clean(f"{name} (°C)"))
    ax2.set_ylabel("temperature (°C)")
    freq = tel.get("freq_khz") or {}
    if freq:
        axf = ax2.twinx()
        for name, col in freq.items():
            tp, vp = _pool_max(tt, _series_values(col, 1000.0))
            handles += axf.plot(tp / scale, vp, linewidth=0.8, alpha=0.7, linestyle="--", label=clean(f"{name} (MHz)"))
        axf.set_ylabel("CPU frequency (MHz)")
    for a, b in _throttled_spans(tel):
        for axis in panels:
            axis.axvspan(a / scale, b / scale, color="#d62728", alpha=0.15, linewidth=0)
    if _throttled_spans(tel):
        ax.text(0.01, 0.95, "shaded: firmware throttling", transform=ax.transAxes, fontsize=8, color=WORST, va="top")
    settle = run.config.get("settle_s") or 0
    if settle > 0:  # the loads started this long before the first wake-up measured (t = 0)
        for axis in panels:
            axis.axvspan(-settle / scale, 0, color="#999999", alpha=0.25, linewidth=0)
        ax.text(
            -settle / scale,
            0.02,
            f" loads starting ({settle:g} s, not measured)",
            transform=ax.get_xaxis_transform(),
            fontsize=7,
            color="#555555",
            va="bottom",
            rotation=90,
        )
    if handles:
        ax2.legend(handles=handles, loc="upper left", fontsize=7, ncol=2)
    else:
        ax2.text(
            0.5,
            0.5,
            "no temperature or frequency telemetry",
            ha="center",
            va="center",
            transform=ax2.transAxes,
            color="#777",
        )
    ax2.set_xlabel(f"time ({unit})")
    ax2.grid(True, alpha=0.3)
    return fig


def _exceedance(hist: Histogram) -> tuple[np.ndarray, np.ndarray]:
    """x (µs), fraction of all samples above x; ends where the histogram does."""
    n = hist.total
    if not hist.in_range or not n:
        return np.zeros(0), np.zeros(0)
    x = (hist.hi_ns + 1) / 1000.0
    above = (n - np.cumsum(hist.count)) / n
    return np.concatenate([[hist.lo_ns[0] / 1000.0], x]), np.concatenate([[1.0], above])


def exceedance(runs: list[RunResult]) -> Figure:
    """Fraction of wake-ups later than x (log-log): the tail, read directly.
    One curve per CPU for a single run, one per run (all CPUs) for several."""
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    curves = (
        [(f"CPU {c.cpu}", c.hist, c.max_ns) for c in runs[0].cpus]
        if len(runs) == 1
        else [(clean(r.label or r.run_id), merged_histogram(r), r.max_ns) for r in runs]
    )
    plotted = False
    for name, hist, max_ns in curves:
        x, y = _exceedance(hist)
        keep = (y > 0) & (x > 0)
        plotted |= bool(keep.any())
        (line,) = ax.step(x[keep], y[keep], where="post", label=f"{name}: max {_fmt_us(max_ns)} µs")
        if hist.overflow and hist.range_max_ns is not None and hist.range_max_ns >= 0:
            ax.plot(
                [(hist.range_max_ns + 1) / 1000.0],
                [hist.overflow / hist.total],
                marker="o",
                color=line.get_color(),
                label=f"{name}: {hist.overflow:,} beyond the histogram",
            )
            plotted = True
    if not plotted:
        # Nothing to draw (status lines only): log axes cannot autoscale to no data.
        ax.set_xlim(1, 1000)
        ax.set_ylim(1e-6, 1)
        ax.text(
            0.5,
            0.5,
            "no histogram was kept, so the tail is unknown",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="#777",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("latency x (µs)")
    ax.set_ylabel("fraction of wake-ups later than x")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(_title(runs[0]) if len(runs) == 1 else "exceedance, all CPUs of each run", fontsize=10)
    return fig


def compare_overlay(runs: list[RunResult]) -> Figure:
    """Several runs on one OSADL-style axis, all CPUs of each run together."""
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.add_subplot()
    hists = [merged_histogram(r) for r in runs]
    top = _top_us(hists)
    bin_us = _nice_bin_us(top)
    for r, h in zip(runs, hists):
        edges, counts = collapse(*us_bins(h, bin_us, top))
        s = summarize_all(r)
        ax.stairs(
            counts,
            edges,
            linewidth=1.3,
            label=clean(f"{r.label or r.run_id} ({r.system.get('preempt_model', '?')}): max {_fmt_us(s.max_ns)} µs"),
        )
    _log_counts(ax, any(h.in_range for h in hists))
    ax.set_xlim(0, top)
    ax.set_xlabel("latency (µs)")
    ax.set_ylabel("samples" if bin_us == 1 else f"samples per {bin_us} µs")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("latency histograms compared (all CPUs of each run)", fontsize=10)
    return fig


def render(fig: Figure, fmt: str) -> bytes:
    """SVG (text kept as text, so it scales and stays small) or PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()


def inline_svg(fig: Figure) -> str:
    """SVG markup without the XML prologue, for embedding in HTML."""
    svg = render(fig, "svg").decode()
    return svg[svg.index("<svg") :]
