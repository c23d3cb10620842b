"""What every plot shares: matplotlib set up once (Agg, text kept as text),
text from users made literal, tick labels that are plain numbers, colours,
and rendering to SVG or PNG.

Text from users and files (labels, host names, kernel releases, command
lines) goes through ``plain``: matplotlib reads a pair of '$' as TeX, so a
label "costs $5 or $6" would be typeset, and a lone bad one raises.  Axis
ticks use our own formatters, which print numbers ('10⁴', '1,000'), never
TeX source such as '$\\mathdefault{10^{4}}$' that an SVG viewer would show
verbatim when the text is kept as text.
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")  # no display, ever
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVG

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from ..results.display import clean  # noqa: E402
from ..results.model import RunResult  # noqa: E402
from ..units import format_ns, format_us  # noqa: E402

WORST = "#d62728"
# tab10 without its red, which marks the worst CPU
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
CYCLE = "#000000"
EMULATED_NOTE = "emulated (QEMU): latencies are emulation noise, not the hardware's"
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")

# The smallest text a plot holds, in points: a figure 10-11 in wide shown in an
# 800 px window is drawn at about 0.75 px per point, and 9 pt is then ~9 px.
SMALL = 9
# A cycle time up to REACH times the data's top is drawn as a line, the axis
# stretched to it; beyond that the data keep their range and the cycle time
# is an arrow with its value at the edge (docs/measuring.md).
REACH = 1.25
DENSE = 2.5      # decades: a log axis shorter than this is labelled 1, 2, 5, 10, 20, 50 ...

__all__ = ["Figure", "plain", "color", "power_ticks", "number_ticks", "cycle_label", "render", "inline_svg", "title",
           "fmt_us", "linear_ticks", "legend_above", "mark_cycle", "SMALL", "REACH"]


def plain(text: object, limit: int = 300) -> str:
    """Text from a user or a file, shown as written: no control character
    (invalid in SVG's XML), no TeX."""
    return clean(text)[:limit].replace("$", r"\$")


def color(i: int, worst: int) -> str:
    return WORST if i == worst else PALETTE[i % len(PALETTE)]


def _power(value: float, _pos=None) -> str:
    if value <= 0:
        return ""
    exp = math.log10(value)
    if abs(exp - round(exp)) > 1e-9:
        return ""
    return "1" if round(exp) == 0 else "10" if round(exp) == 1 else f"10{str(round(exp)).translate(_SUPERSCRIPT)}"


def _number(value: float, _pos=None) -> str:
    if value <= 0:
        return "0" if value == 0 else ""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _linear(value: float, _pos=None) -> str:
    """A linear axis' tick: 1,000 like the tables, 2.5 where a step is fractional."""
    if value == round(value):
        return f"{round(value):,}"
    return f"{value:,.3f}".rstrip("0")


def linear_ticks(axis) -> None:
    """A linear axis labelled 0, 500, 1,000 (thousands separated as in every table)."""
    axis.set_major_formatter(FuncFormatter(_linear))


def legend_above(ax, handles=None, ncol: int = 4) -> None:
    """The legend above the panel, never over its data, nor over the cycle
    time's line or arrow (nor over a twin axis' labels beside it)."""
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.01), borderaxespad=0, fontsize=SMALL,
              ncol=ncol, frameon=False)


def mark_cycle(ax, cycle_ns: int, top: float, *, horizontal: bool = False, log: bool = False) -> None:
    """The cycle time on an axis of µs whose data end at top.  Within REACH
    of the data: a dashed line, the axis stretched just past it.  Beyond:
    the axis keeps the data's range and an arrow with the cycle time's value
    points off its far edge (a 1 ms line would squeeze an 84 µs run's
    histogram into the left 8 % of the plot)."""
    cycle_us = cycle_ns / 1000.0
    label = cycle_label(cycle_ns)
    if cycle_us <= top * REACH:
        line = ax.axhline if horizontal else ax.axvline
        line(cycle_us, color=CYCLE, linestyle="--", linewidth=1.2, label=label, zorder=4)
        lo, hi = ax.get_ylim() if horizontal else ax.get_xlim()
        end = cycle_us * (1.15 if log else 1.04)
        if end > hi:
            (ax.set_ylim if horizontal else ax.set_xlim)(lo, end)
        return
    arrow = "↑" if horizontal else "→"
    ax.annotate(f"{label} {arrow}", xy=(0.995, 0.985), xycoords="axes fraction", ha="right", va="top",
                fontsize=SMALL + 1, color=CYCLE, zorder=6,
                bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": CYCLE, "linewidth": 0.8})


def power_ticks(axis) -> None:
    """A log axis labelled 1, 10, 10², 10³ ... (counts, fractions)."""
    axis.set_major_locator(LogLocator(base=10, numticks=12))
    axis.set_major_formatter(FuncFormatter(_power))
    axis.set_minor_formatter(NullFormatter())


def number_ticks(axis, decades: float | None = None) -> None:
    """A log axis of latencies labelled 1, 10, 100, 1,000 (µs); over fewer
    than DENSE decades also 2 and 5 of each, so the data's own stretch is labelled."""
    subs = (1.0, 2.0, 5.0) if decades is not None and decades < DENSE else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    axis.set_major_formatter(FuncFormatter(_number))
    axis.set_minor_formatter(NullFormatter())


def cycle_label(cycle_ns: int) -> str:
    return f"cycle time {format_ns(cycle_ns)}"


def title(run: RunResult) -> str:
    s = run.system
    parts = [run.label or run.run_id, f"kernel {s.get('kernel_release') or '?'}",
             f"preemption {s.get('preempt_model') or '?'}"]
    if run.config.get("loads"):
        parts.append("load " + ",".join(map(str, run.config["loads"])))
    text = plain(" · ".join(parts))
    if run.config.get("emulated"):
        text += "\n" + EMULATED_NOTE
    return text


def fmt_us(ns) -> str:
    return format_us(ns, unknown="?")


def render(fig: Figure, fmt: str) -> bytes:
    """SVG (text kept as text, so it scales and stays small) or PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()


def inline_svg(fig: Figure) -> str:
    """SVG markup without the XML prologue, for embedding in HTML."""
    svg = render(fig, "svg").decode()
    return svg[svg.index("<svg"):]
