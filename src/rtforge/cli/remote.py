"""rtforge latency HOST, attach and fetch: latency runs on a board.

Ctrl-C (or SIGTERM) while following a run only lets go of it: the run goes
on on the board and the message says how to attach again or stop it.  That
is the point of running detached -- ending a run is a deliberate
`rtforge latency HOST --stop RUN`, never a side effect of a closed laptop.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..errors import UserError
from ..measure.boardrun import BoardRun, NothingMeasured, list_runs, resolve_run
from ..measure.remote import POLL_S, collect, expected_s, follow, net_flood, start_remote_run, stop_run
from ..measure.spec import LatencySpec
from ..results.model import RunResult
from ..results.stats import show_dict
from ..results.store import Store
from ..target import SshTransport
from . import app
from .render import make_console, print_result, us

SSH_CONFIG = typer.Option(None, "--ssh-config", help="ssh client config file (ssh -F), e.g. for a Host alias")
RESULTS_DIR = typer.Option(None, "--results-dir", envvar="RTFORGE_RESULTS_DIR", help="run store (default: XDG data dir)")
POLL = typer.Option(POLL_S, "--poll-s", hidden=True, help="seconds between progress polls")


def _err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)  # a hint is one line, never cut


def _transport(host: str, ssh_config: Path | None) -> SshTransport:
    return SshTransport(host, ssh_config=ssh_config)


def _hint(host: str, run_id: str) -> str:
    return (f"the run {run_id} goes on on {host}: `rtforge attach {host} {run_id}` follows it again and stores it "
            f"when done; `rtforge latency {host} --stop {run_id}` ends it now")


class _Follower:
    """Live progress (when stdout is a terminal) and connection notices."""

    def __init__(self, host: str, quiet: bool):
        from .latency import LiveProgress  # latency imports this module lazily: no cycle

        self.host = host
        self.console = make_console()
        self.live = LiveProgress(self.console) if sys.stdout.isatty() and not quiet else None

    def notice(self, message: str | None) -> None:
        text = (f"[yellow]connection to {self.host} lost ({message}); the run goes on there, reconnecting…[/yellow]"
                if message else f"reconnected to {self.host}")
        (self.live.live.console if self.live else _err()).print(text, highlight=False)

    def follow(self, run: BoardRun, total: float | None, loads: list[str], address: str | None,
               poll_s: float) -> None:
        flood_ctx = nullcontext(None)
        if "net" in loads and address:
            first = run.poll()
            remaining = max(1.0, total - (first.elapsed_s or 0)) if total else None
            try:
                flood_ctx = net_flood(address, remaining)
            except UserError as e:
                _err().print(f"[yellow]warning:[/yellow] the net load cannot run from here ({e})")
        with flood_ctx as flood, (self.live or nullcontext()):
            follow(run, total, poll_s=poll_s, on_progress=self.live, on_connection=self.notice, flood=flood)


def _show(result: RunResult, store: Store, as_json: bool) -> int:
    if as_json:
        print(json.dumps(show_dict(result), indent=1))
    else:
        console = make_console()
        print_result(result, console)
        console.print(f"stored as {result.run_id} in {store.root}", style="dim")
    return 130 if result.state == "interrupted" else 0


def remote_latency(host: str, spec: LatencySpec, *, ssh_config: Path | None, detach: bool, install: bool,
                   results_dir: Path | None, as_json: bool, poll_s: float = POLL_S) -> int:
    store = Store(results_dir)
    transport = _transport(host, ssh_config)
    err = _err()
    steps = (lambda s: err.print(s, style="dim")) if sys.stderr.isatty() else None
    launched: list[str] = []
    try:
        try:
            started = start_remote_run(spec, transport, store, install=install, detach=detach, on_step=steps,
                                       on_launch=lambda run: launched.append(run.run_id))
        except KeyboardInterrupt:
            if launched:  # the start command was sent: the run may well be going
                err.print(_hint(host, launched[0]))
            raise
        run = started.run
        if detach:
            print(run.run_id)
            err.print(_hint(host, run.run_id).replace(" again", ""))
            return 0
        try:
            _Follower(host, as_json).follow(run, started.expected_s, started.loads, started.address, poll_s)
            result = collect(run, store)
        except KeyboardInterrupt:
            err.print(_hint(host, run.run_id))
            return 130
    finally:
        transport.close()
    return _show(result, store, as_json)


def remote_stop(host: str, ref: str, *, ssh_config: Path | None, results_dir: Path | None, as_json: bool) -> int:
    store = Store(results_dir)
    transport = _transport(host, ssh_config)
    try:
        run = BoardRun(transport, resolve_run(transport, ref))
        stop_run(run)
        result = collect(run, store)
    finally:
        transport.close()
    _show(result, store, as_json)
    return 0


@app.command()
def attach(
    host: str = typer.Argument(..., help="the board: HOST or USER@HOST"),
    run: str = typer.Argument(..., help="run id on the board (or a unique prefix)"),
    ssh_config: Optional[Path] = SSH_CONFIG,
    results_dir: Optional[Path] = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the result summary as JSON"),
    poll_s: float = POLL,
) -> int:
    """Follow a run on a board again (live progress); store it when it ends."""
    store = Store(results_dir)
    transport = _transport(host, ssh_config)
    try:
        br = BoardRun(transport, resolve_run(transport, run))
        doc = br.read_json()
        if br.poll().alive:
            address = transport.run(["sh", "-c", 'set -- ${SSH_CONNECTION:-}; echo "${3:-}"']).stdout.strip()
            try:
                loads = (doc.get("config") or {}).get("loads") or []
                _Follower(host, as_json).follow(br, expected_s(doc), loads, address, poll_s)
            except KeyboardInterrupt:
                _err().print(_hint(host, br.run_id))
                return 130
        result = collect(br, store)
    finally:
        transport.close()
    return _show(result, store, as_json)


@app.command()
def fetch(
    host: str = typer.Argument(..., help="the board: HOST or USER@HOST"),
    run: Optional[str] = typer.Argument(None, help="run id (or a unique prefix); default: every run that ended"),
    ssh_config: Optional[Path] = SSH_CONFIG,
    results_dir: Optional[Path] = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the fetched runs' summaries as JSON"),
) -> int:
    """Bring finished and partial runs from a board into the store (and off the board)."""
    store = Store(results_dir)
    transport = _transport(host, ssh_config)
    err = _err()
    fetched: list[RunResult] = []
    try:
        if run is not None:
            ids, running = [resolve_run(transport, run)], []
        else:
            runs = list_runs(transport)
            ids = [r.run_id for r in runs if not r.alive]
            running = [r.run_id for r in runs if r.alive]
        for run_id in ids:
            try:
                fetched.append(collect(BoardRun(transport, run_id), store))
            except NothingMeasured as e:
                if run is not None:
                    raise
                err.print(f"{e}; removed it from the board")
    finally:
        transport.close()
    for run_id in running:
        err.print(f"{run_id} is still running on {host}: `rtforge attach {host} {run_id}` follows it")
    if as_json:
        print(json.dumps([show_dict(r) for r in fetched], indent=1))
        return 0
    console = make_console()
    for r in fetched:
        console.print(f"fetched {r.run_id} · {r.state}{' (partial)' if r.partial else ''} · "
                      f"{r.duration_s or 0:.0f} s · max {us(r.max_ns)} µs", highlight=False)
    if not fetched and not running:
        console.print(f"no runs on {host} to fetch")
    return 0
