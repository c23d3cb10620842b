"""rtforge runs / rtforge show: what is in the run store."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..results.bench import bench_show_dict
from ..results.model import RunResult
from ..results.stats import show_dict
from ..results.store import Store
from . import app
from .bench import print_bench_result
from .common import RESULTS_DIR
from .render import cell, clean, make_console, print_result, shown, us


@app.command()
def runs(
    results_dir: Optional[Path] = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the index rows as JSON"),
    reindex: bool = typer.Option(False, "--reindex", help="rebuild the index from the run directories first"),
) -> None:
    """List stored runs, oldest first."""
    store = Store(results_dir)
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
        t = Table(show_edge=False, header_style="bold")
        for col in ("run", "label", "engine", "kernel", "preempt", "load", "duration", "max µs", "p99 µs", "state"):
            t.add_column(col, justify="right" if col.endswith("µs") or col == "duration" else "left")
        for r in rows:
            t.add_row(
                *map(cell, (r.run_id, r.label or "", r.engine, r.kernel_release or "?", r.preempt_model or "?",
                            r.loads or ("–" if r.kind == "bench" else "none"))),  # a benchmark runs without loads
                f"{r.duration_s:.0f} s" if r.duration_s is not None else "?", us(r.max_ns), us(r.p99_ns),
                cell(r.state + (" (partial)" if r.partial and r.state != "running" else "")),
            )
        console.print(t)
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
    run: str = typer.Argument("last", help="run id, a unique prefix of one, or 'last'"),
    results_dir: Optional[Path] = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Per-CPU latency statistics of one stored run (a bench run: its solve times)."""
    store = Store(results_dir)
    result = store.load(store.resolve(run))
    if result.kind == "bench":
        if as_json:
            print(json.dumps(bench_show_dict(result), indent=1))
        else:
            print_bench_result(_displayable(result))
    elif as_json:
        print(json.dumps(show_dict(result), indent=1))
    else:
        print_result(result)


def _displayable(r: RunResult) -> RunResult:
    """A copy whose texts are safe inside rich markup (the bench display prints them so)."""
    return replace(r, label=shown(r.label) if r.label else r.label, host=shown(r.host),
                   warnings=[shown(w) for w in r.warnings],
                   system={k: shown(v) if isinstance(v, str) else v for k, v in r.system.items()})
