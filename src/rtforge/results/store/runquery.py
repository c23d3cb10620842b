"""Which stored runs to list: `rtforge runs --label/--host/--kernel/--since`,
checked as typed and turned into SQL over the index (indexdb.py).

A text filter keeps the runs whose field contains the text, ignoring the
case of ASCII letters (SQLite's LIKE); --since keeps the runs that started
at or after a moment, compared as instants (the index's start_utc).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ...errors import UserError
from ...units import parse_span_s, shown
from .indexdb import _sql

MAX_TEXT = 200   # longer than any label (model.MAX_LABEL), host or kernel release
# 2026-11-01, 2026-11-01T08:00, 2026-11-01 08:00:30, with Z or an offset
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2})?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?")
_SPAN = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?[smhd])+")


@dataclass(frozen=True)
class RunQuery:
    label: str | None = None
    host: str | None = None
    kernel: str | None = None
    since: str | None = None    # UTC ISO text (see since_utc)

    def where(self) -> tuple[str, tuple]:
        """A WHERE clause (or '') and its parameters."""
        terms, params = [], []
        for column, text in (("label", self.label), ("host", self.host), ("kernel_release", self.kernel)):
            if text is not None:
                terms.append(f"{column} LIKE ? ESCAPE '\\'")
                params.append("%" + re.sub(r"([\\%_])", r"\\\1", text) + "%")
        if self.since is not None:
            terms.append("start_utc >= ?")
            params.append(self.since)
        return ("WHERE " + " AND ".join(terms) if terms else ""), _sql(tuple(params))

    @property
    def filtered(self) -> bool:
        return any(v is not None for v in (self.label, self.host, self.kernel, self.since))


def check_text(option: str, text: str) -> str:
    """A filter's text: one line of printable text, not empty, not huge."""
    if not text.strip():
        raise UserError(f"{option} is empty: give the text to look for, e.g. {option} pi4")
    if len(text) > MAX_TEXT:
        raise UserError(f"{option} is {len(text):,} characters long; give at most {MAX_TEXT}")
    if not text.isprintable():
        raise UserError(f"{option} '{shown(text)}' holds a control character or a line break; give one line of text")
    return text.strip()


def since_utc(text: str, now: datetime | None = None) -> str:
    """--since as typed -> UTC ISO text: a date (2026-11-01, local midnight),
    a date and time (2026-11-01T08:00, local unless it says Z or an offset),
    or a time ago (7d, 12h, 1h30m)."""
    t = text.strip()
    try:
        if _SPAN.fullmatch(t.lower()) and len(t) <= 40:
            when = (now or datetime.now(UTC)) - timedelta(seconds=parse_span_s(t, "--since"))
        elif _DATE.fullmatch(t):
            try:
                when = datetime.fromisoformat(t.replace(" ", "T"))
            except ValueError:
                raise UserError(f"--since '{shown(text)}' is not a day of the calendar: give a date like "
                                "2026-11-01") from None
            if when.tzinfo is None:
                when = when.astimezone()   # as the user's clock says it
        else:
            raise UserError(f"--since '{shown(text)}' is not a date: give one like 2026-11-01 or 2026-11-01T08:00, "
                            "or a time ago like 7d or 12h")
        return when.astimezone(UTC).isoformat(timespec="seconds")
    except (OverflowError, ValueError):   # before the year 1, or after 9999, in UTC
        raise UserError(f"--since '{shown(text)}' is out of range: give a date nearer today, "
                        "or a shorter time ago") from None
