"""rtforge runs / rtforge show: what is in the run store."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import typer
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

from ..errors import UserError
from ..results.stats import show_dict
from ..results.store.indexdb import IndexRow
from ..results.store.runquery import RunQuery, check_text, since_utc
from .common import RESULTS_DIR, RUN_HELP, check_label, settled_store
from .render import Col, cell, clean, fitted, make_console, plain_table, print_result, shown, us

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


# The id is what the user types next, max the figure they came for: never cut.
RUNS_COLS = [Col("run", key=True), Col("label", drop=7, wrap=True, min_width=12), Col("engine", drop=1),
             Col("kernel", drop=4, wrap=True, min_width=18), Col("preempt", drop=2), Col("load", drop=0),
             Col("duration", drop=3, right=True), Col("max µs", key=True, right=True),
             Col("p99 µs", drop=5, right=True), Col("state", drop=6)]


@app.command()
def runs(
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the index rows as JSON (every row, unless --limit)"),
    reindex: bool = typer.Option(False, "--reindex", help="rebuild the index from the run directories first"),
    every: bool = typer.Option(False, "--all", help="on a terminal too, list every run (not only those that fit)"),
    limit: str | None = typer.Option(None, "--limit", metavar="N", help="only the newest N runs"),
    label: str | None = typer.Option(None, "--label", metavar="TEXT", help="runs whose label contains TEXT"),
    host: str | None = typer.Option(None, "--host", metavar="TEXT", help="runs whose host contains TEXT"),
    kernel: str | None = typer.Option(None, "--kernel", metavar="TEXT",
                                      help="runs whose kernel release contains TEXT, e.g. rt or 6.12"),
    since: str | None = typer.Option(None, "--since", metavar="DATE",
                                     help="runs that started on or after DATE (2026-11-01, 2026-11-01T08:00, "
                                          "local time) or that long ago (7d, 12h)"),
) -> None:
    """List stored runs by the time each was stored, the newest last.

    An import was stored when it was imported.  On a terminal: the newest
    runs that fit on the screen; into a pipe or a file: every one."""
    query = RunQuery(label=None if label is None else check_text("--label", label),
                     host=None if host is None else check_text("--host", host),
                     kernel=None if kernel is None else check_text("--kernel", kernel),
                     since=None if since is None else since_utc(since))
    newest = None if limit is None else _limit(limit)
    if every and newest is not None:
        raise UserError("--all and --limit contradict each other: give one of them")
    store = settled_store(results_dir, check=True)
    if reindex:
        store.reindex()
    damaged = store.damaged()
    if as_json:
        _json_rows(store.rows(query, newest=newest))
        for d in damaged:  # stdout stays the rows, for scripts
            print(f"rtforge: warning: run folder {clean(d.folder)} is damaged: {clean(d.path)}: {clean(d.why)}",
                  file=sys.stderr)
        return
    console = make_console()
    total = store.count(query)
    if not total and (query.filtered or not damaged):
        stored = store.count() if query.filtered else 0
        console.print(f"no run of the {stored:,} stored matches: `rtforge runs` lists them all" if stored else
                      f"no runs in {shown(store.root)} yet: `rtforge latency` measures one", highlight=False)
        return
    if total:
        fit = console.is_terminal and not every and newest is None
        _print_runs(console, store, query, total, newest, fit, damaged)
    if damaged:
        _print_damaged(console, damaged, most=3 if console.is_terminal and not every else None)


def _limit(text: str) -> int:
    t = text.strip()
    if not re.fullmatch(r"[0-9]{1,9}", t) or int(t) < 1:
        raise UserError(f"--limit wants a whole number of runs from 1 to 999999999, got '{clean(text)}'")
    return int(t)


def _json_rows(rows) -> None:
    """The rows as one JSON list, a run per line, written as they come (not
    built as one list first: a store holds thousands)."""
    out = sys.stdout
    first = True
    for r in rows:
        out.write(("[\n " if first else ",\n ") + json.dumps({**vars(r), "partial": r.partial}))
        first = False
    out.write("[]\n" if first else "\n]\n")
    out.flush()


def _cells(r: IndexRow) -> list[str]:
    """A row's cells, cleaned (results/display.py); text, never markup (fitted and plain_table take str as it is)."""
    return [clean(v) for v in (
        r.run_id, r.label or "", r.engine, r.kernel_release or "?", r.preempt_model or "?",
        "–" if r.kind == "bench" else "?" if r.loads is None else r.loads or "none",  # a benchmark runs none
        f"{r.duration_s:.0f} s" if r.duration_s is not None else "?", us(r.max_ns), us(r.p99_ns),
        r.state + (" (partial)" if r.partial and r.state != "running" else ""))]


def _print_runs(console, store, query: RunQuery, total: int, newest: int | None, fit: bool, damaged) -> None:
    """The table of runs, its heading and, when runs are left out, the line
    saying how to see them.  fit: the newest runs that fit on the terminal
    with the lines around them (the shell's prompt included)."""
    cells = [_cells(r) for r in store.rows(query, newest=max(console.size.height, 1) if fit else newest)]
    if not fit:
        plain = plain_table(console, RUNS_COLS, cells)
        console.print(_heading(len(cells), total, query))
        if plain is None:
            console.print(fitted(console, RUNS_COLS, cells))
        else:
            console.file.write("\n".join(plain) + "\n")
        if len(cells) < total:
            console.print(_more(total - len(cells)))
        return
    room = console.size.height - 1 - (_lines(console, *_damaged_parts(damaged, 3)) if damaged else 0)
    n = len(cells)
    while True:
        around = [_heading(n, total, query), *([_more(total - n)] if n < total else [])]
        rows_room = room - _lines(console, *around) - 2   # 2: the table's head and its rule
        if n > max(rows_room, 1):   # a line a run at best: no table drawn yet
            n = max(rows_room, 1)
            continue
        # drawn once, to count its lines (a label or a kernel may wrap), and printed as drawn
        table = console.render_lines(fitted(console, RUNS_COLS, cells[-n:]), console.options, pad=False,
                                     new_lines=True)
        over = len(table) - 2 - rows_room
        if over <= 0 or n == 1:
            break
        n = max(n - over, 1)   # the oldest go first
    console.print(around[0])
    console.print(Segments(segment for line in table for segment in line), end="")
    for part in around[1:]:
        console.print(part)


def _more(hidden: int) -> Text:
    return Text(f"{hidden:,} older run{'s' if hidden > 1 else ''} not shown: --all lists them all, --limit N the "
                "newest N; --label, --host, --kernel and --since DATE narrow the list", style="yellow")


def _heading(shown: int, total: int, query: RunQuery) -> Text:
    matching = " matching" if query.filtered else ""
    which = (f"{shown:,}{matching} run{'s' if shown > 1 else ''}" if shown == total else
             f"the newest {shown:,} of {total:,}{matching} runs")
    return Text(f"{which}, by the time each was stored or imported", style="dim")


def _lines(console, *parts) -> int:
    return sum(len(console.render_lines(p, console.options, pad=False)) for p in parts)


def _damaged_parts(damaged, most: int | None) -> list:
    many = len(damaged) > 1
    t = Table(show_edge=False, header_style="bold")
    for col in ("folder", "what is wrong", "where"):
        t.add_column(col, overflow="fold")  # the whole of why and where, never cut
    for d in damaged[:most]:
        t.add_row(cell(d.folder), cell(d.why), cell(d.path))
    parts = [Text.from_markup(f"[yellow]{len(damaged)} damaged run folder{'s' if many else ''}[/yellow] (not listed "
                              "above; repair or delete them, or import the runs again):"), t]
    if most is not None and len(damaged) > most:
        parts.append(Text(f"and {len(damaged) - most} more: --all lists every one"))
    return parts


def _print_damaged(console, damaged, most: int | None) -> None:
    for p in _damaged_parts(damaged, most):
        console.print(p)


@app.command()
def show(
    run: str = typer.Argument("last", help=RUN_HELP),
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Per-CPU latency statistics of one stored run (a bench run: its solve times)."""
    store = settled_store(results_dir)
    result = store.load(store.resolve(run))
    if result.kind == "bench":
        # imported here: the bench's display needs numpy (~0.1 s), which listing and showing runs do not
        from ..results.bench.summary import bench_show_dict
        from .bench import print_bench_result

        if as_json:
            print(json.dumps(bench_show_dict(result), indent=1))
        else:
            print_bench_result(result)
    elif as_json:
        print(json.dumps(show_dict(result), indent=1))
    else:
        print_result(result)


@app.command("label")
def label_cmd(
    run: str = typer.Argument(..., help=RUN_HELP),
    label: str = typer.Argument(..., help="the new label ('' removes it)"),
    results_dir: Path | None = RESULTS_DIR,
) -> None:
    """Give a stored run a label, by which commands can name it (`rtforge compare stock rt`)."""
    store = settled_store(results_dir)
    run_id = store.resolve(run)
    new = check_label(label) or None
    others = [r for r in store.labelled(new) if r != run_id] if new is not None else []
    result = store.relabel(run_id, new)
    console = make_console()
    console.print(f"run {shown(result.run_id)} is now labelled “{shown(new)}”" if new else
                  f"run {shown(result.run_id)} has no label now", highlight=False)
    if others:
        many = len(others) > 1
        console.print(f"[yellow]note:[/yellow] {len(others)} other run{'s' if many else ''} "
                      f"({shown(', '.join(others[:3]))}) {'carry' if many else 'carries'} the same label: "
                      "name runs by id where labels repeat", highlight=False)


@app.command("delete")
def delete_cmd(
    runs: list[str] = typer.Argument(..., help=RUN_HELP + "; several may be given"),
    yes: bool = typer.Option(False, "--yes", "-y", help="delete without asking"),
    results_dir: Path | None = RESULTS_DIR,
) -> None:
    """Delete stored runs, their files and their index rows."""
    store = settled_store(results_dir)
    chosen = list(dict.fromkeys(store.resolve(ref) for ref in runs))
    results = [store.load(run_id) for run_id in chosen]
    for r in results:
        if r.state == "running":
            raise UserError(f"run {r.run_id} is still running: end it with `rtforge latency --stop {r.run_id}` "
                            "first, then delete it")
    names = ", ".join(r.run_id + (f" ({r.label})" if r.label else "") for r in results)
    if not yes:
        if not sys.stdin.isatty():
            raise UserError(f"deleting {names} cannot be undone: give --yes to delete without being asked")
        if not typer.confirm(f"delete {clean(names)} and all its files?", default=False):
            raise UserError("nothing was deleted")
    for r in results:
        store.remove(r.run_id)
    make_console().print(f"deleted {shown(names)}", highlight=False)
