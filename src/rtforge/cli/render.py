"""Shared display of stored results: one table per run, the same for
`rtforge latency` at the end of a run and for `rtforge show`.

Everything a result holds may come from a file someone else wrote (an
imported host name, a label, a hand-edited result.json), so it is shown
through ``clean`` (results/display.py): a terminal never receives its
control characters, and rich never reads it as markup."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..results.display import clean, known, loads_text, other_latencies_line, priority_text, spike_lines
from ..results.model import RunResult
from ..results.stats import irq_summary, percentile_text, summarize_all, summarize_cpu, telemetry_summary
from ..units import format_seconds, format_us


def shown(value: object) -> str:
    """clean(value), escaped for rich markup."""
    return escape(clean(value))


def cell(value: object) -> Text:
    """A table cell that rich never reads as markup."""
    return Text(clean(value))


def us(ns: int | float | None, *, beyond: bool = False) -> str:
    """ns -> 'µs with one decimal'; a percentile beyond the histogram's range is '> range'."""
    if ns is None:
        return "> range" if beyond else "–"
    return format_us(ns)


def _count(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def _overflow(s) -> str:
    """Samples beyond the histogram: '?' when the file did not say, '–' without a histogram."""
    if not s.histogram:
        return "–"
    return "?" if s.overflow is None else f"{s.overflow:,}"


@dataclass
class Col:
    """A column of a table fitted to the terminal: key columns (ids and the
    numbers a user came for) are never cut or dropped; the others are dropped
    in `drop` order (lowest first) until the table fits, and a column whose
    every cell is '–' or '?' goes before any of them."""

    name: str
    key: bool = False
    drop: int = 0
    right: bool = False
    wrap: bool = False          # text that may wrap onto more lines (a description), at least min_width wide
    min_width: int = 12


def fitted(console: Console, cols: list[Col], rows: Sequence[Sequence[object]], *, style=None,
           alike_first: bool = False, **table) -> Table:
    """A rich Table of rows (Text or str cells) that fits console.width:
    columns dropped as Col says, then the room left shared among the columns
    that may wrap; every width is set here, so rich never cuts a cell.
    alike_first: a column that is the same in every row goes before the
    others (a comparison is about what differs)."""
    texts = [[c if isinstance(c, Text) else Text(str(c)) for c in row] for row in rows]
    keep, widths, hidden = _layout(console.width, cols, [[t.plain for t in row] for row in texts], alike_first)
    t = Table(show_edge=False, header_style="bold", **table)
    for i in keep:
        c = cols[i]
        t.add_column(c.name, justify="right" if c.right else "left", width=widths[i], no_wrap=not c.wrap,
                     overflow="fold")
    for n, row in enumerate(texts):
        t.add_row(*(row[i] for i in keep), style=style(n) if callable(style) else style)
    t.hidden = hidden  # type: ignore[attr-defined]
    return t


def plain_table(console: Console, cols: list[Col], rows: Sequence[Sequence[object]]) -> list[str] | None:
    """The lines fitted(...) prints into a pipe or a file, made here: rich
    spends about a millisecond a row, seconds for a store's thousands of
    runs.  None where rich must draw it: on a terminal (styles), in another
    encoding than UTF-8 (rich draws ASCII rules there) or when a cell would
    wrap.  The same characters as rich (tests/unit/cli/test_plain_table.py)."""
    if console.is_terminal or not console.encoding.lower().startswith("utf"):
        return None
    values = [[c.plain if isinstance(c, Text) else str(c) for c in row] for row in rows]   # no Text: thousands
    keep, widths, _ = _layout(console.width, cols, values, False)
    plain = [[row[i] for i in keep] for row in values]
    if any("\n" in v or cell_len(v) > widths[i] for row in plain for i, v in zip(keep, row, strict=True)):
        return None

    def line(values: list[str], rule: str) -> str:
        return rule.join(" " + (" " * (widths[i] - cell_len(v)) + v if cols[i].right else
                                v + " " * (widths[i] - cell_len(v))) + " " for i, v in zip(keep, values, strict=True))

    return [line([cols[i].name for i in keep], "┃"), "╇".join("━" * (widths[i] + 2) for i in keep),
            *(line(values, "│") for values in plain)]


def _layout(width: int, cols: list[Col], texts: list[list[str]],
            alike_first: bool) -> tuple[list[int], list[int], list[str]]:
    """Which columns fit in width, how wide each is and the names of those
    hidden that held something (see fitted); texts: the cells' plain text."""
    natural = [max([cell_len(c.name)] + [max(cell_len(line) for line in r[i].split("\n")) for r in texts])
               for i, c in enumerate(cols)]
    least = [min(natural[i], c.min_width) if c.wrap else natural[i] for i, c in enumerate(cols)]
    keep = list(range(len(cols)))
    empty = [i for i in keep if not cols[i].key and texts and all(r[i] in ("–", "?", "") for r in texts)]
    if alike_first and len(texts) > 1:
        empty += sorted((i for i in keep if not cols[i].key and i not in empty
                         and len({r[i] for r in texts}) == 1), key=lambda i: cols[i].drop)

    def total(idx: list[int], widths: list[int]) -> int:
        return sum(widths[i] + 2 for i in idx) + max(len(idx) - 1, 0)  # padding 1+1, a rule between columns

    blank = {i for i in empty if all(r[i] in ("–", "?", "") for r in texts)}
    hidden = []
    for i in empty + sorted((i for i in keep if not cols[i].key and i not in empty), key=lambda i: cols[i].drop):
        if total(keep, least) <= width:
            break
        keep.remove(i)
        if i not in blank:   # a column of '–' and '?' hides nothing worth a word
            hidden.append(i)
    widths = list(least)
    room = width - total(keep, least)
    # The room left, shared among the wrapping columns by water-filling: the
    # column that needs least is satisfied first, the rest share what is left.
    wanting = sorted((i for i in keep if cols[i].wrap and natural[i] > least[i]), key=lambda i: natural[i] - least[i])
    while wanting and room > 0:
        i = wanting.pop(0)
        more = min(natural[i] - widths[i], room // (len(wanting) + 1))
        widths[i] += more
        room -= more
    return keep, widths, [c.name for i, c in enumerate(cols) if i in hidden]


def hidden_note(table: Table, how: str = "a wider terminal, or --json, shows them") -> str | None:
    """What `fitted` left out of a table for want of width, and how to see
    it: a table that drops columns without a word looks complete."""
    names = getattr(table, "hidden", [])
    return f"({', '.join(names)}: not shown at this width; {how})" if names else None


def print_table(console: Console, table: Table, how: str = "a wider terminal, or --json, shows them") -> None:
    """A fitted table, then the line naming the columns it hid."""
    console.print(table)
    if note := hidden_note(table, how):
        console.print(note, style="dim", highlight=False)


def run_header(r: RunResult) -> str:
    s, c = r.system, r.config
    # ≈: an import's length from its wake-ups and interval, not a measured one
    about = "≈" if c.get("duration_source") else ""
    dur = "?" if r.duration_s is None else format_seconds(r.duration_s, bool(about))
    interval = "?" if c.get("interval_us") is None else f"{c['interval_us']} µs"
    parts = [
        f"[bold]{shown(r.run_id)}[/bold]" + (f"  “{shown(r.label)}”" if r.label else ""),
        shown(f"{r.engine} · {r.state}{' (partial)' if r.partial else ''} · {dur} · interval {interval} · "
              f"priority {priority_text(c)} · load {loads_text(c)}"),
        shown(f"{r.host} · kernel {known(s.get('kernel_release'))} · preemption {known(s.get('preempt_model'))}"
              + (f" · {s['board_model']}" if s.get("board_model") else "")),
    ]
    if r.config.get("emulated"):
        parts.append("[yellow]emulated (QEMU): these latencies are emulation noise, not the hardware's[/yellow]")
    return "\n".join(parts)


# The per-CPU table: the worst case and the tail are what a user came for.
LATENCY_COLS = [Col("CPU", key=True), Col("count", drop=3, right=True), Col("min", drop=2, right=True),
                Col("avg", drop=4, right=True), Col("p50", drop=1, right=True), Col("p99", key=True, right=True),
                Col("p99.9", drop=5, right=True), Col("p99.99", drop=7, right=True), Col("max", key=True, right=True),
                Col("overruns", drop=8, right=True), Col("spikes", drop=0, right=True),
                Col("overflow", drop=6, right=True)]


def latency_table(r: RunResult, console: Console | None = None) -> Table:
    rows = [summarize_cpu(c) for c in r.cpus]
    if len(rows) > 1:
        rows.append(summarize_all(r))
    threads = bool(r.config.get("cpu_is_thread"))
    cells = [[cell(("thread " if threads and s.cpu != "all" else "") + str(s.cpu)), _count(s.count), us(s.min_ns),
              us(s.avg_ns), *(percentile_text(s, v) for v in (s.p50_ns, s.p99_ns, s.p999_ns, s.p9999_ns)),
              us(s.max_ns), _count(s.overruns), _count(s.spikes), _overflow(s)]
             for s in rows]
    cols = list(LATENCY_COLS)
    if threads:
        cols[0] = Col("thread", key=True)
    return fitted(console or make_console(), cols, cells,
                  style=lambda n: "bold" if rows[n].cpu == "all" else None)


def telemetry_line(r: RunResult) -> str:
    if r.telemetry is None:  # an import, or a run without the monitor: nobody looked at the board
        return "temperature: not recorded · throttling: not recorded"
    tel = telemetry_summary(r.telemetry)
    if tel["temp_max_mc"] is None:
        temp = "temperature: no sensor"
    else:
        temp = f"temperature {tel['temp_min_mc'] / 1000:.1f}–{tel['temp_max_mc'] / 1000:.1f} °C"
    if tel["throttled_seen"] is None:
        thr = "throttling: not reported by this board"
    else:
        thr = "throttling: " + (", ".join(tel["throttle_flags"]) if tel["throttled_seen"] else "none seen")
    return f"{temp} · {thr}"


def irq_line(r: RunResult) -> str | None:
    s = irq_summary(r.series)
    if s is None or s["irqs_median"] is None or r.series is None:
        return None
    if s["irqs"] is None:
        # The probe counts a second's interrupts when the next one begins, so
        # the second a run ends in has none; say so rather than drop the line.
        ended = ": the run ended in it" if s["t_s"] == r.series["t_s"][-1] else ""
        return (f"interrupts: not counted in the second of its worst wake-up ({s['t_s']} s{ended}); "
                f"CPU {s['cpu']}'s median second {s['irqs_median']:,}")
    line = (f"interrupts: CPU {s['cpu']} took {s['irqs']:,} in the second of its worst wake-up ({s['t_s']} s; "
            f"its median second {s['irqs_median']:,})")
    if s["irq_thread_pct"] is not None:
        then = f" ({s['irq_thread_top']} {s['irq_thread_top_pct']:.1f} %)" if s["irq_thread_top"] else ""
        line += f" · irq threads then {s['irq_thread_pct']:.1f} % of a CPU{then}"
        if s["irq_thread_max_pct"] is not None:
            most = f" ({s['irq_thread_max_top']})" if s["irq_thread_max_top"] else ""
            line += f", at most {s['irq_thread_max_pct']:.1f} %{most}"
    return line


def make_console() -> Console:
    """Rich console; when stdout is a file or pipe, wide enough that tables
    are never cut (rich would assume 80 columns)."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def print_result(r: RunResult, console: Console | None = None) -> None:
    console = console or make_console()
    console.print(run_header(r), highlight=False)
    if r.cpus:
        console.print("latency in µs", style="dim")
        print_table(console, latency_table(r, console))
    else:
        console.print("nothing was measured", style="dim")
    if others := other_latencies_line(r):
        console.print(shown(others), highlight=False)
    console.print(shown(telemetry_line(r)), highlight=False)
    if irqs := irq_line(r):
        console.print(shown(irqs), highlight=False)
    if r.trace is not None:
        lines = spike_lines(r.trace)
        console.print(f"spikes traced by rtla timerlat: {len(r.trace.get('spikes') or [])}"
                      if lines else "spikes traced by rtla timerlat: none over the threshold", highlight=False)
        for line in lines:
            console.print(f"  {shown(line)}", highlight=False)
    for w in r.warnings:
        console.print(f"[yellow]warning:[/yellow] {shown(w)}", highlight=False)
