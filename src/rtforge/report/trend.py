"""A board's soak history as OSADL draws it, from the store only.

    trend_figure(trends)   per board: the long-term plot (the worst wake-up
                           of each window over days, kernel changes marked,
                           gaps shaded, alert windows in red) above the
                           kernels side by side: each kernel's distribution
                           (share of wake-ups later than x) and the spread
                           of its window maxima
    trend_section(trends)  the same with its table and the promotion rule's
                           verdict, as an HTML fragment or Markdown, for a
                           report

`load_trend(folder, rule)` reads a board's fetched folder
(results/soak/folder.py) into what both need.
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..results.display import clean, md_cell
from ..results.soak.promotion import KernelSpan, Rule, Verdict, changes, evaluate, gaps, kernel_spans, limits
from ..results.soak.windows import (
    P9999,
    Reading,
    Rollup,
    Window,
    merged_histogram,
    pending_rollups,
    read_windows,
)
from ..results.soak.windowsdb import MonitorDB
from ..units import format_us, plural
from .plotting import PALETTE, SMALL, WORST, Figure, inline_svg, linear_ticks, number_ticks, plain, power_ticks


@dataclass
class HostTrend:
    host: str
    windows: list[Window]
    spans: list[KernelSpan]
    verdict: Verdict
    rule: Rule
    changes: list[tuple[int, str, str]]
    gaps: list[dict]
    damaged: list[tuple[str, str]] = field(default_factory=list)
    hours: list[Rollup] = field(default_factory=list)   # one per hour and life, merged over the CPUs
    window_count: int = 0                               # len(windows), kept by light()

    def light(self) -> HostTrend:
        """What the table, the JSON and the verdict need, without the windows,
        the hours and the spans' per-window lists (a year of a board is ~70 MB
        of them): `trend` over 20 boards holds one board's at a time."""
        spans = {id(s): replace(s, window_max_ns=[], maxima=[], dist=[]) for s in self.spans}
        verdict = replace(self.verdict, candidate=spans.get(id(self.verdict.candidate)),
                          reference=spans.get(id(self.verdict.reference)))
        return replace(self, windows=[], hours=[], spans=list(spans.values()), verdict=verdict)


def load_trend(folder: Path, host: str, rule: Rule, since_ns: int | None = None,
               until_ns: int | None = None) -> HostTrend:
    """A board's trend from the store's index of its folder (results/soak/windowsdb.py):
    the windows' figures and the hours' merged histograms of the span asked,
    never the windows' own histograms, which months of them would make
    gigabytes of."""
    reading = Reading()
    with MonitorDB.open(folder) as db:
        windows = db.windows(since_ns, until_ns)
        hours = db.rollups("hour", since_ns, until_ns)
        events = [e for e in db.events() if _within(e, since_ns, until_ns)]
        reading.damaged += db.damaged
    # the hour in progress (the board's pending.jsonl, as fetched): not filed yet, so not indexed
    hours += [r for r in pending_rollups(folder, hours, reading)
              if r.kind == "hour" and _within({"t_ns": r.start_ns}, since_ns, until_ns)]
    if not hours and windows:  # no hours fetched yet (a short run): the windows' own histograms
        windows = [w for w in read_windows(folder, reading) if _within({"t_ns": w.start_ns}, since_ns, until_ns)]
    spans = kernel_spans(windows, hours or None, events)
    return HostTrend(host, windows, spans, evaluate(spans, rule), rule, changes(windows), gaps(events),
                     reading.damaged, hours, len(windows))


def _within(e: dict, since_ns: int | None, until_ns: int | None) -> bool:
    t = e.get("t_ns")
    return isinstance(t, int) and (since_ns is None or t >= since_ns) and (until_ns is None or t < until_ns)


def _us_label(value: float, _pos=None) -> str:
    """A tick as a plain number: 0.5, 42.5, 1,000 (never TeX, never rounded into a twin)."""
    if value <= 0:
        return ""
    return f"{value:,.0f}" if value >= 1000 or value == round(value) else f"{value:.3g}"


def _latency_ticks(axis) -> None:
    """1, 2, 5, 10, 20, 50 ...: maxima of months often lie within one decade,
    which powers of ten alone would leave unlabelled."""
    number_ticks(axis)
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=15))
    axis.set_major_formatter(FuncFormatter(_us_label))
    axis.set_minor_formatter(NullFormatter())


def _latency_axis(ax, which: str, values, label: str) -> None:
    """A latency axis by the plots' one rule: logarithmic (1, 2, 5, 10 ...)
    only when the values span more than a decade, and then its label says
    so; within a decade a log axis was labelled "30 35 40" at uneven
    spacing, which reads as linear -- there it is linear."""
    vals = [v for v in values if v is not None and v > 0]
    axis = ax.yaxis if which == "y" else ax.xaxis
    if vals and max(vals) > 10 * min(vals):
        (ax.set_yscale if which == "y" else ax.set_xscale)("log")
        _latency_ticks(axis)
        label += ", log scale"
    else:
        linear_ticks(axis)
    (ax.set_ylabel if which == "y" else ax.set_xlabel)(f"{label})")


def _when(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


# More windows than this in the plot's width and their points merge into a
# solid band: then each hour (or day) is drawn as its max over the p99.99.
POINTS_MAX = 2500


def _bucket_s(t: HostTrend) -> int:
    """0: a point per window; else the seconds each band step spans (an hour, or a day)."""
    if len(t.windows) <= POINTS_MAX:
        return 0
    span_s = (t.windows[-1].end_ns - t.windows[0].start_ns) / 1e9
    return 3600 if span_s / 3600 <= POINTS_MAX else 86400


def _bands(ax, t: HostTrend, s: KernelSpan, color: str, bucket_s: int) -> None:
    """Per hour (day) of the kernel: its worst window (a line) over its p99.99 (the band's floor)."""
    step = bucket_s * 1_000_000_000
    mx: dict[int, int] = {}
    for w in t.windows:
        if (w.kernel, w.kver) == (s.release, s.version) and w.max_ns is not None:
            k = w.start_ns // step
            mx[k] = max(mx.get(k, 0), w.max_ns)
    dist: dict[int, list] = {}
    for r in t.hours:
        if r.kernels and r.kernels[0] == (s.release, s.version):
            dist.setdefault(r.start_ns // step, []).append(r)
    keys = sorted(mx)
    if not keys:
        return
    x = date2num([_when(k * step + step // 2) for k in keys])
    top = np.array([mx[k] / 1000 for k in keys])
    tails = []
    for k in keys:
        hist, lo, hi = merged_histogram(dist.get(k, []))
        q = hist.quantile(P9999, lo, hi) if hist.total else None
        tails.append(q / 1000 if q is not None else np.nan)
    floor = np.array(tails)
    unit = "hour" if bucket_s == 3600 else "day"
    ax.fill_between(x, floor, top, color=color, alpha=0.25, lw=0, step="mid")
    ax.plot(x, top, "-", lw=0.8, color=color, drawstyle="steps-mid", label=plain(f"kernel {s.label}: max per {unit}"))
    ax.plot(x, floor, "-", lw=0.6, color=color, alpha=0.8, drawstyle="steps-mid")


def _long_term(ax, t: HostTrend, colors: dict[str, str]) -> None:
    """Max per window over time: one point per window, in its kernel's
    colour; over a span whose points would merge, bands (max per hour or
    day over its p99.99).  The legend stands below the plot, never on its data."""
    bucket_s = _bucket_s(t)
    for s in t.spans:
        if bucket_s:
            _bands(ax, t, s, colors[s.label], bucket_s)
            continue
        pairs = [(w, m) for w in t.windows if (w.kernel, w.kver) == (s.release, s.version)
                 and (m := w.max_ns) is not None]
        if not pairs:
            continue
        ws = [w for w, _ in pairs]
        x = date2num([_when((w.start_ns + w.end_ns) // 2) for w in ws])
        y = np.array([m / 1000 for _, m in pairs])
        ax.plot(x, y, ".", ms=3, color=colors[s.label], label=plain(f"kernel {s.label}"))
        alert = np.array([w.alert is not None for w in ws])
        if alert.any():
            ax.plot(x[alert], y[alert], "o", ms=5, mfc="none", color=WORST)
    for g in t.gaps:
        ax.axvspan(date2num(_when(g["from_ns"])), date2num(_when(max(g["to_ns"], g["from_ns"]))),
                   color="#bbbbbb", alpha=0.5, lw=0)
    for when, _, to in t.changes:
        x = date2num(_when(when))
        ax.axvline(x, color="black", ls="--", lw=1)
        ax.annotate(plain(f"→ {to}", 60), (x, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=SMALL)
    for name, ns in limits(t.verdict, t.rule).items():
        if name == "max":   # the promotion limit of the maxima this plot shows
            ax.axhline(ns / 1000, color=WORST, ls=":", lw=1.2,
                       label=plain(f"promotion limit: max of kernel {t.verdict.reference.label} "  # type: ignore[union-attr]
                                   f"+ {t.rule.margin * 100:g} % = {ns / 1000:,.1f} µs", 120))
    what = "max per window" if not bucket_s else f"per {'hour' if bucket_s == 3600 else 'day'}: p99.99 to max"
    # the values drawn in data units (a kernel change's vertical line spans the axes, 0 to 1)
    drawn = [v for line in ax.get_lines() if line.get_transform().contains_branch_seperately(ax.transData)[1]
             for v in line.get_ydata() if np.isfinite(v)]
    _latency_axis(ax, "y", drawn, f"{what} (µs")
    loc = AutoDateLocator()
    ax.xaxis.set_major_locator(loc)
    # the year and month in the label, not as an offset text crowding its right end
    ax.xaxis.set_major_formatter(ConciseDateFormatter(loc, show_offset=False))
    span = ""
    if t.windows:
        first, last = _when(t.windows[0].start_ns), _when(t.windows[-1].end_ns)
        span = f" {first:%Y-%m-%d}" + (f" to {last:%Y-%m-%d}" if last.date() != first.date() else "")
    ax.set_xlabel(f"time (UTC{span}); grey: not measured" + ("; circled: alert windows" if not bucket_s else ""))
    ax.grid(True, which="major", alpha=0.3)
    if t.spans:   # below the axes, under their label: never on the data
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), borderaxespad=0, fontsize=SMALL, ncol=2)


def _distributions(ax, t: HostTrend, colors: dict[str, str]) -> None:
    """Each kernel's share of wake-ups later than x (1 - CDF): the tail, comparable whatever N."""
    for s in t.spans:
        h = s.hist
        if h is None or h.total == 0:
            continue
        n = h.total
        later = (n - np.cumsum(h.count)) / n
        x = (h.hi_ns + 1) / 1000
        keep = later > 0
        # from the fastest wake-up at 1, each bucket's end steps down; the last level reaches the worst one
        xs = np.concatenate([[h.lo_ns[0] / 1000], x[keep], [x[-1]]])
        ys = np.concatenate([[1.0], later[keep], [later[keep][-1] if keep.any() else 1.0]])
        ax.step(xs, ys, where="post", color=colors[s.label], label=plain(f"{s.label} (N={n:,})"))
    ax.set_yscale("log")
    _latency_axis(ax, "x", [v for line in ax.get_lines() for v in line.get_xdata()], "latency (µs")
    power_ticks(ax.yaxis)
    ax.axhline(1e-4, color="#999999", lw=0.8, ls=":")
    ax.set_ylabel("share of wake-ups later")
    ax.set_title("per kernel: the tail (dotted: p99.99)", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    if t.spans:
        ax.legend(fontsize=SMALL)


def _window_maxima(ax, t: HostTrend, colors: dict[str, str]) -> None:
    spans = [s for s in t.spans if s.window_max_ns]
    if spans:
        parts = ax.boxplot([np.array(s.window_max_ns) / 1000 for s in spans], whis=(0, 100), widths=0.5,
                           patch_artist=True)
        for box, s in zip(parts["boxes"], spans):
            box.set_facecolor(colors[s.label])
            box.set_alpha(0.6)
        ax.set_xticks(range(1, len(spans) + 1), [plain(s.label, 40) for s in spans], fontsize=SMALL, rotation=10)
    _latency_axis(ax, "y", [v / 1000 for s in spans for v in s.window_max_ns], "max per window (µs")
    ax.set_title("per kernel: window maxima (whiskers: min and max)", fontsize=9)


def trend_figure(trends: list[HostTrend]) -> Figure:
    fig, rows = trend_rows(len(trends))
    for sub, t in zip(rows, trends):
        draw_trend(sub, t)
    return fig


def trend_rows(boards: int) -> tuple[Figure, list]:
    """The figure of `boards` boards, and the row each is drawn in (draw_trend)."""
    fig = Figure(figsize=(11, 7.5 * max(1, boards)), layout="constrained")
    return fig, list(fig.subfigures(max(1, boards), 1, squeeze=False)[:, 0])


def draw_trend(sub, t: HostTrend) -> None:
    """One board's row: drawn from its whole trend, which may then be let go."""
    colors = {s.label: PALETTE[i % len(PALETTE)] for i, s in enumerate(t.spans)}
    axes = sub.subplot_mosaic([["long", "long"], ["dist", "box"]], height_ratios=[1.2, 1])
    _long_term(axes["long"], t, colors)
    _distributions(axes["dist"], t, colors)
    _window_maxima(axes["box"], t, colors)
    head = (f"{t.host}: {plural(t.window_count, 'window')}, {plural(len(t.spans), 'kernel')}, "
            f"{plural(len(t.gaps), 'gap')}")
    sub.suptitle(plain(head, 120) + "\n" + "\n".join(textwrap.wrap(plain(t.verdict.line, 400), 140)), fontsize=9)


# ---- the report's section ------------------------------------------------------
COLUMNS = ["kernel", "from", "to", "days", "windows", "p99.99 (µs)", "max (µs)", "alerts", "unclean restarts"]


def _row(s: KernelSpan) -> list[str]:
    day = "%Y-%m-%d %H:%M"
    return [s.label, _when(s.first_ns).strftime(day), _when(s.last_ns).strftime(day), f"{s.days:.1f}",
            f"{s.windows:,}", format_us(s.p9999_ns, unknown="?"), format_us(s.max_ns, unknown="?"), str(s.alerts),
            str(s.unclean)]


def trend_section(trends: list[HostTrend], fmt: str = "html") -> str:
    """The trend of each board with its table, the rule and its verdict."""
    out = []
    if fmt == "md":
        out.append("## Trends across days and kernels\n")
        for t in trends:
            out.append(f"### {md_cell(t.host)}\n")
            out.append("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS))
            out += ["| " + " | ".join(md_cell(v) for v in _row(s)) + " |" for s in t.spans]
            out.append(f"\nPromotion rule: {md_cell(t.rule.text())}.\n\n**{md_cell(t.verdict.line)}**\n")
        return "\n".join(out) + "\n"
    esc = lambda v: html.escape(clean(v))  # noqa: E731
    out.append("<section class='trend'><h2>Trends across days and kernels</h2>")
    out.append(inline_svg(trend_figure(trends)))
    for t in trends:
        out.append(f"<h3>{esc(t.host)}</h3><table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in COLUMNS) + "</tr>")
        out += ["<tr>" + "".join(f"<td>{esc(v)}</td>" for v in _row(s)) + "</tr>" for s in t.spans]
        out.append(f"</table><p>Promotion rule: {esc(t.rule.text())}.</p>"
                   f"<p class='verdict {esc(t.verdict.status)}'><b>{esc(t.verdict.line)}</b></p>")
    out.append("</section>")
    return "\n".join(out)
