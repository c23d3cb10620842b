"""rtforge fetch HOST: runs that ended on a board, into the store (and off
the board).  Following and stopping runs, here or on a board, is
`rtforge attach` and `rtforge latency --stop` (cli/latency.py)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..device import board_host, open_transport
from ..errors import UserError
from ..measure.session import fetch_runs
from ..results.bench.summary import bench_show_dict
from ..results.stats import show_dict
from ..results.store.runstore import Store
from .common import HOST_REQUIRED, RESULTS_DIR, SSH_CONFIG, err_console
from .render import make_console, us

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


@app.command()
def fetch(
    host: str = typer.Argument(..., help=HOST_REQUIRED.split(";")[0]),
    run: str | None = typer.Argument(None, help="run id (or a unique prefix); default: every run that ended"),
    ssh_config: Path | None = SSH_CONFIG,
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the fetched runs' summaries as JSON"),
) -> int:
    """Bring finished and partial runs from a board into the store (and off the board)."""
    if board_host(host) is None:
        raise UserError(f"fetch brings runs from a board, and {host} is this machine, whose runs are stored "
                        "as they end: give the board's USER@HOST, HOST or ssh config alias")
    store = Store(results_dir)
    transport = open_transport(host, ssh_config)
    err = err_console()
    try:
        done = fetch_runs(store, transport, run)
    finally:
        transport.close()
    for said in done.empty:
        err.print(f"{said}; removed it from the board")
    for run_id in done.running:
        err.print(f"{run_id} is still running on {host}: `rtforge attach {host} {run_id}` follows it")
    fetched = done.results
    if as_json:
        print(json.dumps([show_dict(r) if r.kind != "bench" else bench_show_dict(r) for r in fetched], indent=1))
        return 0
    console = make_console()
    for r in fetched:
        what = f"max {us(r.max_ns)} µs" if r.kind != "bench" else "CPU benchmark"
        console.print(f"fetched {r.run_id} · {r.state}{' (partial)' if r.partial else ''} · "
                      f"{r.duration_s or 0:.0f} s · {what}", highlight=False)
    if not fetched and not done.running:
        console.print(f"no runs on {host} to fetch")
    return 0

