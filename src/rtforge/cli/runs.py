"""rtforge runs / rtforge show: what is in the run store."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from ..errors import UserError
from ..results.stats import show_dict
from .common import RESULTS_DIR, RUN_HELP, check_label, settled_store
from .render import Col, cell, clean, fitted, make_console, print_result, shown, us

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


# The id is what the user types next, max the figure they came for: never cut.
RUNS_COLS = [Col("run", key=True), Col("label", drop=7, wrap=True, min_width=12), Col("engine", drop=1),
             Col("kernel", drop=4, wrap=True, min_width=18), Col("preempt", drop=2), Col("load", drop=0),
             Col("duration", drop=3, right=True), Col("max µs", key=True, right=True),
             Col("p99 µs", drop=5, right=True), Col("state", drop=6)]


@app.command()
def runs(
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the index rows as JSON"),
    reindex: bool = typer.Option(False, "--reindex", help="rebuild the index from the run directories first"),
) -> None:
    """List stored runs, oldest first."""
    store = settled_store(results_dir, check=True)
    if reindex:
        store.reindex()
    rows = store.list()
    damaged = store.damaged()
    if as_json:
        print(json.dumps([{**vars(r), "partial": r.partial} for r in rows], indent=1))
        for d in damaged:  # stdout stays the rows, for scripts
            print(f"rtforge: warning: run folder {clean(d.folder)} is damaged: {clean(d.path)}: {clean(d.why)}",
                  file=sys.stderr)
        return
    console = make_console()
    if not rows and not damaged:
        console.print(f"no runs in {shown(store.root)} yet: `rtforge latency` measures one", highlight=False)
        return
    if rows:
        cells = [[r.run_id, r.label or "", r.engine, r.kernel_release or "?", r.preempt_model or "?",
                  "–" if r.kind == "bench" else "?" if r.loads is None else r.loads or "none",  # a benchmark runs none
                  f"{r.duration_s:.0f} s" if r.duration_s is not None else "?", us(r.max_ns), us(r.p99_ns),
                  r.state + (" (partial)" if r.partial and r.state != "running" else "")] for r in rows]
        console.print(fitted(console, RUNS_COLS, [[cell(v) for v in row] for row in cells]))
    if damaged:
        console.print(f"[yellow]{len(damaged)} damaged run folder{'s' if len(damaged) > 1 else ''}[/yellow] "
                      "(not listed above; repair or delete them, or import the runs again):", highlight=False)
        t = Table(show_edge=False, header_style="bold")
        for col in ("folder", "what is wrong", "where"):
            t.add_column(col, overflow="fold")  # the whole of why and where, never cut
        for d in damaged:
            t.add_row(cell(d.folder), cell(d.why), cell(d.path))
        console.print(t)


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
        from ..results.bench import bench_show_dict
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
