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
from ..units import format_ns  # noqa: E402

WORST = "#d62728"
# tab10 without its red, which marks the worst CPU
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
CYCLE = "#000000"
EMULATED_NOTE = "emulated (QEMU): latencies are emulation noise, not the hardware's"
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")

__all__ = ["Figure", "plain", "color", "power_ticks", "number_ticks", "cycle_label", "render", "inline_svg", "title",
           "fmt_us"]


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


def power_ticks(axis) -> None:
    """A log axis labelled 1, 10, 10², 10³ ... (counts, fractions)."""
    axis.set_major_locator(LogLocator(base=10, numticks=12))
    axis.set_major_formatter(FuncFormatter(_power))
    axis.set_minor_formatter(NullFormatter())


def number_ticks(axis) -> None:
    """A log axis of latencies labelled 1, 10, 100, 1,000 (µs)."""
    axis.set_major_locator(LogLocator(base=10, numticks=12))
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
    return "?" if ns is None else f"{ns / 1000:.1f}"


def render(fig: Figure, fmt: str) -> bytes:
    """SVG (text kept as text, so it scales and stays small) or PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()


def inline_svg(fig: Figure) -> str:
    """SVG markup without the XML prologue, for embedding in HTML."""
    svg = render(fig, "svg").decode()
    return svg[svg.index("<svg"):]
