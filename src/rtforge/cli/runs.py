"""rtforge runs / rtforge show: what is in the run store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..results.bench import bench_show_dict
from ..results.stats import show_dict
from ..results.store import Store
from . import app
from .bench import print_bench_result
from .render import make_console, print_result, us

RESULTS_DIR = typer.Option(None, "--results-dir", envvar="RTFORGE_RESULTS_DIR", help="run store (default: XDG data dir)")


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
    if as_json:
        print(json.dumps([{**vars(r), "partial": r.partial} for r in rows], indent=1))
        return
    if not rows:
        make_console().print(f"no runs in {store.root} yet: `rtforge latency` measures one")
        return
    t = Table(show_edge=False, header_style="bold")
    for col in ("run", "label", "engine", "kernel", "preempt", "load", "duration", "max µs", "p99 µs", "state"):
        t.add_column(col, justify="right" if col.endswith("µs") or col == "duration" else "left")
    for r in rows:
        t.add_row(
            r.run_id, r.label or "", r.engine, r.kernel_release or "?", r.preempt_model or "?",
            r.loads or ("–" if r.kind == "bench" else "none"),  # a benchmark runs without loads
            f"{r.duration_s:.0f} s" if r.duration_s is not None else "?", us(r.max_ns), us(r.p99_ns),
            r.state + (" (partial)" if r.partial and r.state != "running" else ""),
        )
    make_console().print(t)


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
            print_bench_result(result)
    elif as_json:
        print(json.dumps(show_dict(result), indent=1))
    else:
        print_result(result)
