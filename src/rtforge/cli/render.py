"""Shared display of stored results: one table per run, the same for
`rtforge latency` at the end of a run and for `rtforge show`.

Everything a result holds may come from a file someone else wrote (an
imported host name, a label, a hand-edited result.json), so it is shown
through ``clean`` (results/display.py): a terminal never receives its
control characters, and rich never reads it as markup."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..results.display import clean
from ..results.model import RunResult
from ..results.stats import irq_summary, percentile_text, summarize_all, summarize_cpu, telemetry_summary
from ..results.timerlat import spike_lines


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
    return f"{ns / 1000:.1f}"


def _count(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def run_header(r: RunResult) -> str:
    s = r.system
    loads = ",".join(map(str, r.config.get("loads") or [])) or "none"
    dur = f"{r.duration_s:.0f} s" if r.duration_s is not None else "?"
    parts = [
        f"[bold]{shown(r.run_id)}[/bold]" + (f"  “{shown(r.label)}”" if r.label else ""),
        shown(f"{r.engine} · {r.state}{' (partial)' if r.partial else ''} · {dur} · interval "
              f"{r.config.get('interval_us', '?')} µs · priority {r.config.get('priority', '?')} · load {loads}"),
        shown(f"{r.host} · kernel {s.get('kernel_release', '?')} · preemption {s.get('preempt_model', '?')}"
              + (f" · {s['board_model']}" if s.get("board_model") else "")),
    ]
    if r.config.get("emulated"):
        parts.append("[yellow]emulated (QEMU): these latencies are emulation noise, not the hardware's[/yellow]")
    return "\n".join(parts)


def latency_table(r: RunResult) -> Table:
    t = Table(title=None, show_edge=False, header_style="bold")
    for name in ("CPU", "count", "min", "avg", "p50", "p99", "p99.9", "p99.99", "max", "overruns", "spikes",
                 "overflow"):
        t.add_column(name, justify="right")
    rows = [summarize_cpu(c) for c in r.cpus]
    if len(rows) > 1:
        rows.append(summarize_all(r))
    for s in rows:
        t.add_row(
            cell(s.cpu), _count(s.count), us(s.min_ns), us(s.avg_ns),
            *(percentile_text(s, v) for v in (s.p50_ns, s.p99_ns, s.p999_ns, s.p9999_ns)), us(s.max_ns),
            _count(s.overruns), _count(s.spikes), _count(s.overflow) if s.histogram else "–",
            style="bold" if s.cpu == "all" else None,
        )
    return t


def telemetry_line(r: RunResult) -> str:
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
    if s is None or s["irqs"] is None:
        return None
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
    console.print("latency in µs", style="dim")
    console.print(latency_table(r))
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
