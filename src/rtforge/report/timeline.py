"""The timeline of one run: its per-second maximum per CPU, with (when
recorded) the interrupts per second below it and the temperature and CPU
frequency at the bottom, throttling shaded and the loads' settle time
greyed before t = 0.

A panel is drawn only when its data exists (a board without a thermal
sensor gets no empty temperature axis).  Legends sit above their panel, so
they never hide the data.  The last second of a run is usually cut short
(a few dozen wake-ups, a fraction of a second's interrupts): it is left
out of the per-second lines rather than drawn as a sudden drop; its
wake-ups are in the histogram like every other.
"""

from __future__ import annotations

import math

import numpy as np

from ..results.model import RunResult
from ..units import format_us
from .plotting import SMALL, Figure, color, legend_above, linear_ticks, mark_cycle, plain, title

MAX_POINTS = 2_000      # per line in time series: max-pooled beyond that
FULL_SECOND = 0.9       # a second with fewer wake-ups than this share of the expected ones is cut short


def pool_max(t: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def time_unit(span_s: float) -> tuple[float, str]:
    if span_s < 600:
        return 1.0, "s"
    if span_s < 10 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


def throttled_spans(tel: dict) -> list[tuple[float, float]]:
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


def values(col: list, div: float = 1.0) -> np.ndarray:
    return np.asarray([np.nan if x is None else x / div for x in col], dtype=float)


def _whole_seconds(run: RunResult) -> np.ndarray:
    """True for each second of the series in which every CPU was measured
    for (nearly) the whole second; only the last one is usually short."""
    series = run.series or {}
    n = len(series.get("t_s") or [])
    whole = np.ones(n, dtype=bool)
    interval = run.config.get("interval_us")
    counts = series.get("count")
    if n and interval and counts:
        expected = 1e6 / interval
        last = [col[-1] for col in counts if col]
        if last and min(c or 0 for c in last) < FULL_SECOND * expected:
            whole[-1] = False
    return whole


def _interrupts(ax, run: RunResult, t: np.ndarray, whole: np.ndarray, scale: float, worst: int) -> None:
    """Interrupts per second on each CPU, and the irq/ threads' CPU use on a
    twin axis: the IRQ burst (a USB or network storm, the dwc_otg case) drawn
    under the latency spike it causes."""
    series = run.series or {}
    handles = []
    for i, (cpu, col) in enumerate(zip(series["cpus"], series["irqs"])):
        tp, vp = pool_max(t[whole], values(col)[whole])
        handles += ax.plot(tp / scale, vp, linewidth=1.4 if i == worst else 0.8, color=color(i, worst),
                           label=f"CPU {cpu} interrupts/s")
    ax.set_ylabel("interrupts per second")
    linear_ticks(ax.yaxis)
    peak = max((np.nanmax(line.get_ydata()) for line in handles if np.isfinite(line.get_ydata()).any()), default=1)
    ax.set_ylim(0, max(peak, 1) * 1.1)  # a steady rate is a line below the top edge, not on it
    ax.grid(True, alpha=0.3)
    pct = series.get("irq_thread_pct")
    if pct and any(v is not None for v in pct):
        axt = ax.twinx()
        tp, vp = pool_max(t[whole], values(pct)[whole])
        handles += axt.plot(tp / scale, vp, color="#9467bd", linewidth=0.9, linestyle="--",
                            label="irq/ threads (% of one CPU)")
        axt.set_ylabel("irq/ threads' CPU (%)")
        axt.set_ylim(0, max(1.0, float(np.nanmax(vp)) * 1.1 if np.isfinite(vp).any() else 1.0))  # 0 % stays visible
    legend_above(ax, handles)


def _telemetry(ax, tel: dict, scale: float) -> None:
    tt = np.asarray(tel.get("t_s") or [], dtype=float)
    handles = []
    for name, col in (tel.get("temp_mc") or {}).items():
        tp, vp = pool_max(tt, values(col, 1000.0))
        handles += ax.plot(tp / scale, vp, color="#ff7f0e", linewidth=1.0, label=plain(f"{name} (°C)"))
    ax.set_ylabel("temperature (°C)" if tel.get("temp_mc") else "")
    freq = tel.get("freq_khz") or {}
    if freq:
        axf = ax.twinx() if tel.get("temp_mc") else ax
        for name, col in freq.items():
            tp, vp = pool_max(tt, values(col, 1000.0))
            handles += axf.plot(tp / scale, vp, linewidth=0.8, alpha=0.7, linestyle="--",
                                label=plain(f"{name} (MHz)"))
        axf.set_ylabel("CPU frequency (MHz)")
    ax.grid(True, alpha=0.3)
    legend_above(ax, handles)


def _has_telemetry(tel: dict) -> bool:
    cols = [*(tel.get("temp_mc") or {}).values(), *(tel.get("freq_khz") or {}).values()]
    return any(v is not None for col in cols for v in col)


def timeline(run: RunResult, cycle_ns: int | None = None) -> Figure | None:
    """Per-second max per CPU over time and what was recorded beside it;
    None for runs without a per-second series."""
    series = run.series
    if not series or not series.get("t_s"):
        return None
    t = np.asarray(series["t_s"], dtype=float)
    whole = _whole_seconds(run)
    tel = run.telemetry or {}
    span = max(t[-1], (tel.get("t_s") or [0])[-1]) if len(t) else 1.0
    scale, unit = time_unit(span)
    irqs = bool(series.get("irqs")) and any(v is not None for col in series["irqs"] for v in col) and whole.any()
    telemetry = _has_telemetry(tel)
    heights = [3] + ([1.6] if irqs else []) + ([2] if telemetry else [])
    fig = Figure(figsize=(11, 2.2 + 1.4 * sum(heights)), layout="constrained")
    panels = fig.subplots(len(heights), 1, sharex=True, height_ratios=heights, squeeze=False)[:, 0]
    ax = panels[0]
    maxes = [max((v for v in col if v is not None), default=-1) for col in series["max_ns"]]
    worst = int(np.argmax(maxes)) if maxes else -1
    for i, (cpu, col) in enumerate(zip(series["cpus"], series["max_ns"])):
        tp, vp = pool_max(t[whole], values(col, 1000.0)[whole])
        ax.plot(tp / scale, vp, linewidth=1.6 if i == worst else 0.9, color=color(i, worst),
                label=f"CPU {cpu}: max {format_us(maxes[i], unit=True)}" if maxes[i] >= 0 else f"CPU {cpu}")
    ax.set_ylabel("max latency per second (µs)")
    drawn = [v for v in maxes if v >= 0]
    top = max(drawn) / 1000.0 if drawn else 1.0
    # room above the worst second for the cycle time's arrow, which never covers it
    ax.set_ylim(0, top * 1.2)
    linear_ticks(ax.yaxis)
    if cycle_ns:
        mark_cycle(ax, cycle_ns, top, horizontal=True)
    ax.grid(True, alpha=0.3)
    legend_above(ax)
    fig.suptitle(title(run), fontsize=10)
    if irqs:
        _interrupts(panels[1], run, t, whole, scale, worst)
    if telemetry:
        _telemetry(panels[-1], tel, scale)
    spans = throttled_spans(tel)
    for a, b in spans:
        for axis in panels:
            axis.axvspan(a / scale, b / scale, color="#d62728", alpha=0.15, linewidth=0)
    if spans:
        ax.text(0.01, 0.95, "shaded: firmware throttling", transform=ax.transAxes, fontsize=SMALL, color="#d62728",
                va="top")
    settle = run.config.get("settle_s") or 0
    if settle > 0:  # the loads started this long before the first wake-up measured (t = 0)
        for axis in panels:
            axis.axvspan(-settle / scale, 0, color="#999999", alpha=0.25, linewidth=0)
        ax.text(-settle / scale, 0.02, f" loads starting ({settle:g} s, not measured)",
                transform=ax.get_xaxis_transform(), fontsize=SMALL, color="#555555", va="bottom", rotation=90)
    panels[-1].set_xlabel(f"time ({unit})")
    return fig
