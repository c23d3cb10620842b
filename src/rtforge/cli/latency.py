"""rtforge latency [HOST]: measure wake-up latency here or on a board, under load."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeElapsedColumn

from ..errors import UserError
from ..measure.loads import load_profiles, parse_loads
from ..measure.remote import POLL_S
from ..measure.session import Progress, run_latency
from ..measure.spec import LatencySpec, parse_cpu_list, parse_duration
from ..results.stats import show_dict
from ..results.store import Store
from . import app
from .render import make_console, print_result, us

LOAD_HELP = "comma-separated loads: " + ", ".join(load_profiles())


class LiveProgress:
    """Elapsed/total and max so far per CPU, redrawn from the engine's
    checkpoint; silent when stdout is not a terminal."""

    def __init__(self, console: Console):
        self.bar = Bar(TextColumn("measuring"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                       console=console, transient=True)
        self.task = self.bar.add_task("", total=None)
        self.live = Live(self.bar, console=console, transient=True, refresh_per_second=4)

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        return self.live.__exit__(*exc)

    def __call__(self, p: Progress) -> None:
        total = f"/{p.total_s:.0f} s" if p.total_s else " s"
        maxes = "  ".join(f"CPU{cpu} max {us(v)} µs" for cpu, v in sorted(p.max_ns.items()))
        self.bar.update(self.task, total=p.total_s, completed=min(p.elapsed_s, p.total_s or p.elapsed_s),
                        description=f"{p.elapsed_s:.0f}{total}  {maxes}")


@app.command()
def latency(
    host: Optional[str] = typer.Argument(None, help="board to measure over SSH, HOST or USER@HOST (default: this machine)"),
    duration: Optional[str] = typer.Option(None, "--duration", "-D", help="how long: 90s, 10m, 2h, 1h30m (default 60s)"),
    loops: Optional[int] = typer.Option(None, "--loops", "-l", help="stop after this many wake-ups per CPU instead"),
    interval_us: int = typer.Option(200, "--interval-us", "-i", help="wake-up period in µs"),
    priority: int = typer.Option(90, "--priority", "-p", help="SCHED_FIFO priority of the measuring threads"),
    policy: str = typer.Option("fifo", "--policy", help="fifo or rr"),
    cpus: Optional[str] = typer.Option(None, "--cpus", "-c", help="CPUs to measure, e.g. 0-3,6 (default: all)"),
    load: Optional[str] = typer.Option(None, "--load", "-L", help=LOAD_HELP),
    label: Optional[str] = typer.Option(None, "--label", help="a name for this run, e.g. 'stock kernel'"),
    engine: str = typer.Option("probe", "--engine", "-e", help="probe (default) or cyclictest"),
    spike_us: Optional[float] = typer.Option(None, "--spike-us", help="log wake-ups later than this (default: half the interval)"),
    histogram_us: Optional[int] = typer.Option(None, "--histogram-us", help="cyclictest histogram range (default: 10 intervals, at least 1000)"),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", envvar="RTFORGE_RESULTS_DIR", help="run store (default: XDG data dir)"),
    as_json: bool = typer.Option(False, "--json", help="print the result summary as JSON"),
    detach: bool = typer.Option(False, "--detach", help="HOST: start the run and return at once (prints its id)"),
    stop: Optional[str] = typer.Option(None, "--stop", metavar="RUN", help="HOST: end that run cleanly and store it"),
    install: bool = typer.Option(False, "--install", help="HOST: install missing load tools with apt-get (sudo)"),
    ssh_config: Optional[Path] = typer.Option(None, "--ssh-config", help="HOST: ssh client config file (ssh -F)"),
    poll_s: float = typer.Option(POLL_S, "--poll-s", hidden=True, help="HOST: seconds between progress polls"),
) -> int:
    """Measure wake-up latency on this machine or on a board (HOST, over SSH), optionally under load.

    On a board the run is detached from the SSH session: a dropped connection
    or Ctrl-C here leaves it going; `rtforge attach HOST RUN` follows it again."""
    if host is None:
        for flag, given in (("--detach", detach), ("--stop", stop is not None), ("--install", install),
                            ("--ssh-config", ssh_config is not None)):
            if given:
                raise UserError(f"{flag} is for runs on a board: name the board first, "
                                f"e.g. rtforge latency pi@raspberrypi.local {flag}")
    elif stop is not None:
        from .remote import remote_stop  # remote imports LiveProgress from here

        return remote_stop(host, stop, ssh_config=ssh_config, results_dir=results_dir, as_json=as_json)
    if duration is not None and loops is not None:
        raise UserError("give --duration or --loops, not both")
    spec = LatencySpec(
        duration_s=None if loops else parse_duration(duration or "60s"),
        loops=loops, interval_us=interval_us, priority=priority, policy=policy,
        cpus=parse_cpu_list(cpus) if cpus is not None else None,
        loads=parse_loads(load), label=label, engine=engine, spike_us=spike_us, histogram_us=histogram_us,
    )
    if host is not None:
        from .remote import remote_latency

        return remote_latency(host, spec, ssh_config=ssh_config, detach=detach, install=install,
                              results_dir=results_dir, as_json=as_json, poll_s=poll_s)
    store = Store(results_dir)
    console = make_console()
    if sys.stdout.isatty() and not as_json:
        with LiveProgress(console) as live:
            result = run_latency(spec, store, on_progress=live)
    else:
        result = run_latency(spec, store)
    if as_json:
        print(json.dumps(show_dict(result), indent=1))
    else:
        print_result(result, console)
        console.print(f"stored as {result.run_id} in {store.root}", style="dim")
    return 130 if result.state == "interrupted" else 0
