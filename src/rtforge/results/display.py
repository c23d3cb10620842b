"""Texts from files and users, made safe to show.

A stored result may come from a file someone else wrote (an imported host
name, a label, a hand-edited result.json): shown on a terminal, its escape
sequences could rewrite the screen or the window title; in a Markdown
table, a '|' or a newline would break the table.  ``clean`` writes every
non-printable character (ESC, newlines, bidi overrides, lone surrogates)
as a Python escape, visible and inert."""

from __future__ import annotations

import re
import shlex
from typing import Any


def clean(value: object) -> str:
    text = str(value)
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable():
            out.append(c)
        else:
            o = ord(c)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def md_text(value: object) -> str:
    """A Markdown line: newlines become <br>, HTML is escaped, control characters shown."""
    text = re.sub(r"\r\n|\r|\n", "<br>", _html(str(value)))
    return clean(text)


def md_cell(value: object) -> str:
    """A Markdown table cell: md_text, and '|' escaped so the row keeps its columns."""
    return md_text(value).replace("|", "\\|")


def md_code(value: object) -> str:
    """An inline code span that no backtick in the text can end early."""
    text = clean(value)
    if not text.strip():
        return "–"
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if "`" in text else f"`{text}`"


def known(value: object, unknown: str = "?") -> str:
    """A value as rtforge shows it: what nobody recorded is '?', never 'None'."""
    return unknown if value is None or value == "" else str(value)


def loads_text(config: dict) -> str:
    """'cpu,io'; 'none' when the run had no load; '?' when nobody said (an import)."""
    loads = config.get("loads")
    return "?" if loads is None else ",".join(map(str, loads)) or "none"


def priority_text(config: dict) -> str:
    """'fifo 90'; '?' when nothing is known; 'other 0' for SCHED_OTHER runs."""
    policy, priority = config.get("policy"), config.get("priority")
    if policy is None and priority is None:
        return "?"
    return f"{known(policy)} {known(priority)}"


def run_command(run) -> tuple[str, bool]:
    """(the command that made a run, whether rtforge vouches for it).

    A run rtforge measured has its reproducer (or the engine command it ran).
    An import's command line is the file's own record -- possibly edited, or
    not a command at all -- so it is never offered as something to run;
    results written by older versions stored it as the reproducer, hence the
    engine check rather than the field."""
    if run.engine != "import":
        text = run.reproducer or shlex.join(run.engine_argv)
        return text, bool(text)
    foreign = (run.source or {}).get("command_line") or run.reproducer or " ".join(run.engine_argv)
    return foreign or "", False


_CONTEXT_NAMES = {"irq": "timer IRQ latency", "user": "return-to-user latency"}


def other_latencies_line(run) -> str | None:
    """What rtla measured beside the thread latency (an import of its output):
    'rtla also measured: timer IRQ latency max 13,418.0 µs (CPU 0), ...'.
    Read from a stored result: whatever is not the expected shape is left out."""
    others = (run.source or {}).get("other_latencies") if isinstance(run.source, dict) else None
    if not isinstance(others, dict):
        return None
    parts = []
    for key, name in _CONTEXT_NAMES.items():
        rows = [o for o in others.get(key) or [] if isinstance(o, dict)]
        if not rows:
            continue
        maxes = [(o["max_ns"], o.get("cpu")) for o in rows if isinstance(o.get("max_ns"), int)]
        if not maxes:
            parts.append(f"{name}: no sample")
            continue
        worst, cpu = max(maxes, key=lambda m: m[0])
        parts.append(f"{name} max {worst / 1000:,.1f} µs (CPU {clean(cpu)})")
    return "rtla also measured: " + ", ".join(parts) if parts else None


SHOWN = 20  # spike lines shown by `show` and the report, largest first


def spike_lines(trace: dict[str, Any] | None, n: int = SHOWN) -> list[str]:
    """One line per analysed spike, largest first: when, how late, the culprit.
    Read from a stored result, so every value may be anything: what is not
    the expected type is shown as unknown, never an error."""
    if not isinstance(trace, dict):
        return []
    spikes = [s for s in trace.get("spikes") or [] if isinstance(s, dict)]
    spikes.sort(key=lambda s: -(s["total_us"] if isinstance(s.get("total_us"), (int, float)) else 0))
    lines = []
    for s in spikes[:n]:
        t = s.get("t_s")
        when = f" at {t:g} s" if isinstance(t, (int, float)) else ""
        total = s.get("total_us")
        late = f"{total:.1f} µs" if isinstance(total, (int, float)) else "? µs"
        kind = s.get("kind") if s.get("kind") in ("irq", "thread") else "?"
        lines.append(f"CPU {s.get('cpu')}{when}: {late} ({kind} latency) — {s.get('culprit') or 'no breakdown'}")
    if len(spikes) > n:
        lines.append(f"… and {len(spikes) - n} smaller analysed spikes (raw/trace/ of the run)")
    return lines
