"""Durations as people type them, and as rtforge prints them.

A duration always carries its unit: '90' could be seconds, µs or minutes,
and a report written for a 1 µs cycle when 1 ms was meant is worse than a
refusal.  Options whose name holds the unit (--settle-s, --interval-us)
take plain numbers instead.  Digits are ASCII only: Python's float() also
takes '２' (a full-width digit), '1_000', 'nan' and 'inf', none of which a
user means as a number here.
"""

from __future__ import annotations

import math
import re

from .errors import UserError

NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_SPAN_UNITS_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
# '90s', '90 s', '1h30m', '1 h 30 min': rtforge prints "10 s", and what it prints is typed back
_SPAN_RE = re.compile(rf"({NUMBER}) ?(min|[smhd])(?![a-z])")
_NS_UNITS = {"ns": 1, "us": 1000, "µs": 1000, "μs": 1000, "ms": 1_000_000, "s": 1_000_000_000}
_NS_RE = re.compile(rf"({NUMBER}) ?(ns|us|µs|μs|ms|s)")
CYCLE_MAX_NS = 3600 * 1_000_000_000   # an hour: no control cycle is longer


def shown(text: str, limit: int = 40) -> str:
    """What the user typed, safe to print in one line: control characters
    and overlong input as a Python literal."""
    return text if text.isprintable() and len(text) <= limit else ascii(text[:limit]).strip("'")


def parse_span_s(text: str, option: str = "--duration", example: str = "90s, 10m, 2h, 1h30m") -> float:
    """'90s', '10m', '1h30m', '1.5h', '2d' -> seconds.  A bare number is refused."""
    t = re.sub(r"(?<=[0-9]),(?=[0-9]{3})", "", text.strip().lower())   # '7,200 s', as tables print it
    if t and len(t) <= 60 and _SPAN_RE.sub("", t).replace(" ", "") == "":
        return sum(float(n) * _SPAN_UNITS_S[u] for n, u in _SPAN_RE.findall(t))
    if re.fullmatch(NUMBER, t):
        raise UserError(f"{option} '{shown(text)}' has no unit: write it with one, e.g. {t}s or {t}m "
                        f"({example})")
    raise UserError(f"{option} '{shown(text)}' is not a duration: use a number and a unit, e.g. {example}")


def parse_timeout_s(text: str, option: str = "--timeout", most_s: int = 86400) -> int:
    """A wait such as '5m' or '900s' -> whole seconds, 1 s up to most_s."""
    seconds = parse_span_s(text, option, "90s, 5m or 1h")
    if not 1 <= seconds <= most_s:
        raise UserError(f"{option} '{shown(text)}' is out of range: use 1s to {format_span(most_s)}")
    return round(seconds)


def parse_duration_ns(text: str, option: str, example: str) -> int:
    """'1ms', '500us', '250µs', '0.5ms', '750ns', '2s' -> ns, from 1 µs to an hour.  A bare number is refused."""
    t = text.strip()
    m = _NS_RE.fullmatch(t) if len(t) <= 40 else None
    if not m:
        if re.fullmatch(NUMBER, t):
            raise UserError(f"{option} '{shown(text)}' has no unit: write it with one, e.g. {t}us or {t}ms")
        raise UserError(f"{option} '{shown(text)}' is not a duration: use a number and a unit, e.g. {example}")
    ns = round(float(m[1]) * _NS_UNITS[m[2]])
    if not 1000 <= ns <= CYCLE_MAX_NS:
        raise UserError(f"{option} '{shown(text)}' is out of range: use 1us to 1h")
    return ns


def format_ns(ns: int | float) -> str:
    """750 -> '750 ns', 1500 -> '1.5 µs', 1_000_000 -> '1 ms'."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns:.0f} ns"


def format_us(ns: int | float | None, *, unit: bool = False, decimals: int = 1, unknown: str = "–") -> str:
    """A latency as every table, sentence and plot shows it: µs with one
    decimal and thousands separated, 6864123 -> '6,864.1' ('6,864.1 µs'
    with unit); None -> unknown."""
    if ns is None:
        return unknown
    return f"{ns / 1000:,.{decimals}f}" + (" µs" if unit else "")


def format_seconds(seconds: float, about: bool = False) -> str:
    """A run's length as tables and sentences show it: '600 s', '7,200 s',
    '0.4 s' under a second; about: '≈309 s' (worked out, not measured).
    parse_span_s takes it back."""
    return f"{'≈' if about else ''}{seconds:,.{1 if seconds < 1 else 0}f} s"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 board', '2 boards', '1,234 windows', '0 notes': the one way a count
    and its noun are written (nouns: an irregular plural)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def article(word: str) -> str:
    """'a' or 'an' before word as it is read aloud: 'an 84 µs cycle', 'a 1 ms
    cycle', 'an 800 µs cycle', 'an 11 ms cycle', 'a 100 µs cycle'."""
    digits = re.match(r"[0-9][0-9,]*", word)
    if digits:
        # numbers read as eight, eighteen, eighty..., eleven, eleven thousand: the ones said with a vowel
        n = digits[0].replace(",", "")
        return "an" if n.startswith("8") or (n.startswith("11") or n.startswith("18")) and len(n) % 3 == 2 else "a"
    return "an" if word[:1].lower() in "aeio" else "a"


def format_span(seconds: float) -> str:
    """3725 -> '1h2m5s'."""
    s = int(round(seconds))
    parts = [(s // 86400, "d"), (s % 86400 // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    return "".join(f"{n}{u}" for n, u in parts if n) or "0s"


def format_ratio(value: float, boundaries: tuple[float, ...] = (1.0,)) -> str:
    """A ratio with one decimal ('3.2'), or as many more as it takes (up to
    four) never to show a boundary a decision uses, or its far side: a
    margin of 1.99 is not '2.0' (tight means under 2), 1.04 is not '1.0'
    (on time means at most 1).  Past four decimals the value is cut towards
    its own side of the boundary, never rounded across it."""
    if value == float("inf"):
        return "∞"
    for digits in range(1, 5):
        shown = f"{value:.{digits}f}"
        crossed = [b for b in boundaries if _side(float(shown), b) != _side(value, b)]
        if not crossed:
            return shown
    cut = math.ceil(value * 10**4) if value > crossed[0] else math.floor(value * 10**4)
    return f"{cut / 10**4:.4f}"


def _side(value: float, boundary: float) -> int:
    return (value > boundary) - (value < boundary)
