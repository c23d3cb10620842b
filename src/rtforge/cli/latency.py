"""rtforge latency [HOST] and attach: measure wake-up latency here or on a
board, under load; follow a run again.

A run here and a run on a board go through the same lifecycle
(measure.session): both survive a killed rtforge and can be detached,
attached and stopped.  Ctrl-C here ends the run and keeps what was
measured (exit 130); on a board it only lets go of the run, which goes on
(the message says how to attach again or stop it) -- ending a board's run
is a deliberate `--stop`, never a side effect of a closed laptop.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

import typer

from ..device import board_host, open_transport
from ..errors import UserError
from ..measure import session
from ..measure.launch import start_run
from ..measure.loads import parse_loads
from ..measure.options import OPTIONS
from ..measure.spec import LatencySpec, available_cpus, parse_cpu_list, parse_duration, parse_int, parse_number
from ..results.store.runstore import Store
from .common import (
    HOST_OPTIONAL,
    JSON,
    POLL,
    RESULTS_DIR,
    SSH_CONFIG,
    LiveLine,
    check_label,
    err_console,
    hint,
    latency_option,
    show_run,
)
from .render import make_console

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


def parse_poll(text: str | None) -> float | None:
    return parse_number("--poll-s", text, "poll_s") if text is not None else None


def parse_spec(*, duration, loops, interval_us, priority, policy, cpus, load, label, engine, spike_us, histogram_us,
               phase, settle_s, local: bool, trace: bool = False) -> LatencySpec:
    """Every option checked, against the bounds both engines accept, before
    anything connects, starts or is stored.  An option not given (None) is
    its declared default (data/latency_options.toml)."""
    if duration is not None and loops is not None:
        raise UserError("give --duration or --loops, not both")

    def given(name: str, value: str | None) -> str:
        return value if value is not None else str(OPTIONS[name].default)

    return LatencySpec(
        duration_s=None if loops is not None else parse_duration(given("duration", duration)),
        loops=parse_int("--loops", loops, "loops") if loops is not None else None,
        interval_us=parse_int("--interval-us", given("interval_us", interval_us), "interval_us"),
        priority=parse_int("--priority", given("priority", priority), "priority"),
        policy=given("policy", policy).strip().lower(),
        cpus=(parse_cpu_list(cpus, available_cpus()) if local else parse_cpu_list(cpus)) if cpus is not None else None,
        loads=parse_loads(load), label=check_label(label) or None if label is not None else None,
        engine=given("engine", engine).strip().lower(),
        spike_us=parse_number("--spike-us", spike_us, "spike_us") if spike_us is not None else None,
        histogram_us=parse_int("--histogram-us", histogram_us, "histogram_us") if histogram_us is not None else None,
        phase=given("phase", phase).strip().lower(),
        settle_s=parse_number("--settle-s", settle_s, "settle_s") if settle_s is not None else None,
        trace=trace,
    )


def _steps(quiet: bool):
    err = err_console()
    return (lambda s: err.print(s, style="dim")) if sys.stderr.isatty() and not quiet else None


def _notice(live: LiveLine, host: str):
    def notice(message: str | None) -> None:
        text = (f"[yellow]connection to {host} lost ({message}); the run goes on there, reconnecting…[/yellow]"
                if message else f"reconnected to {host}")
        (live.bar.console if live.bar.console.is_terminal else err_console()).print(text, highlight=False)
    return notice


@app.command()
def latency(
    host: str | None = typer.Argument(None, help=HOST_OPTIONAL),
    # the options of a run: each from its one declaration (data/latency_options.toml)
    duration: str | None = latency_option("duration"),
    loops: str | None = latency_option("loops"),
    interval_us: str | None = latency_option("interval_us"),
    priority: str | None = latency_option("priority"),
    policy: str | None = latency_option("policy"),
    cpus: str | None = latency_option("cpus"),
    load: str | None = latency_option("load"),
    label: str | None = typer.Option(None, "--label", help="a name for this run, e.g. 'stock kernel'"),
    engine: str | None = latency_option("engine"),
    phase: str | None = latency_option("phase"),
    spike_us: str | None = latency_option("spike_us"),
    histogram_us: str | None = latency_option("histogram_us"),
    settle_s: str | None = latency_option("settle_s"),
    trace: bool = latency_option("trace"),
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = JSON,
    detach: bool = typer.Option(False, "--detach", help="start the run and return at once (prints its id)"),
    stop: str | None = typer.Option(None, "--stop", metavar="RUN", help="end that run cleanly and store it"),
    install: bool = latency_option("install"),
    ssh_config: Path | None = SSH_CONFIG,
    poll_s: str | None = POLL,
) -> int:
    """Measure wake-up latency on this machine or on a board (HOST, over SSH), optionally under load.

    The run goes on without rtforge: `rtforge attach [HOST] RUN` follows it
    again, `rtforge latency [HOST] --stop RUN` ends it."""
    host = board_host(host)
    if host is None:
        for flag, given in (("--install", install), ("--ssh-config", ssh_config is not None)):
            if given:
                raise UserError(f"{flag} is for runs on a board: name the board first, "
                                f"e.g. rtforge latency pi@raspberrypi.local {flag}")
    poll = parse_poll(poll_s)
    transport = open_transport(host, ssh_config)
    store = Store(results_dir)
    store.check_writable()  # before the run: a store that cannot be written is said as such, in one sentence
    try:
        if stop is not None:  # a deliberate end: success, though the run is partial
            options: list[tuple[str, object]] = [
                ("--duration", duration), ("--loops", loops), ("--cpus", cpus), ("--load", load),
                ("--label", label), ("--spike-us", spike_us), ("--histogram-us", histogram_us),
                ("--settle-s", settle_s), ("--detach", detach or None), ("--trace", trace or None)]
            named = [name for name, value in options if value is not None]
            if named:
                raise UserError(f"--stop ends a run that is going; {', '.join(named)} would start one: give "
                                "either --stop RUN or the options of a new run")
            show_run(session.stop(stop, store, transport), store, as_json)
            return 0
        spec = parse_spec(duration=duration, loops=loops, interval_us=interval_us, priority=priority, policy=policy,
                          cpus=cpus, load=load, label=label, engine=engine, spike_us=spike_us,
                          histogram_us=histogram_us, phase=phase, settle_s=settle_s, local=host is None,
                          trace=trace)
        steps = _steps(as_json)
        if detach:
            started = start_run(spec, store, transport, install=install, detach=True, on_step=steps)
            print(started.run.run_id)
            err_console().print(hint(host, started.run.run_id, again=False))
            return 0
        console = make_console()
        live = LiveLine(console) if sys.stdout.isatty() and not as_json else None
        try:
            with live or nullcontext():
                # the steps before the measuring are the live line's too: printed beside it (another
                # console) they were glued onto its last frame ("0:00:00checking this machine")
                result = session.run_latency(
                    spec, store, transport, install=install, poll_s=poll, on_step=live.update if live else steps,
                    on_progress=live.latency if live else None,
                    on_connection=_notice(live, host) if live and host else _plain_notice(host))
        except session.LetGo as e:
            err_console().print(hint(host, e.run_id))
            return 130
        return show_run(result, store, as_json)
    finally:
        transport.close()


def _plain_notice(host: str | None):
    def notice(message: str | None) -> None:
        err_console().print(f"connection to {host} lost ({message}); the run goes on there, reconnecting…"
                            if message else f"reconnected to {host}")
    return notice


@app.command()
def attach(
    first: str = typer.Argument(..., metavar="[HOST] RUN", help="the run's id (or a unique prefix); for a board: "
                                "HOST first (USER@HOST, HOST or a Host alias of your ssh config)"),
    second: str | None = typer.Argument(None, hidden=True),
    ssh_config: Path | None = SSH_CONFIG,
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = JSON,
    poll_s: str | None = POLL,
) -> int:
    """Follow a run again (live progress) and store it when it ends; Ctrl-C lets go of it again."""
    host, ref = (board_host(first), second) if second is not None else (None, first)
    if host is None and ssh_config is not None:
        raise UserError("--ssh-config is for runs on a board: name the board first, e.g. rtforge attach HOST RUN")
    poll = parse_poll(poll_s)
    transport = open_transport(host, ssh_config)
    store = Store(results_dir)
    store.check_writable()
    live = LiveLine(make_console()) if sys.stdout.isatty() and not as_json else None
    try:
        with live or nullcontext():
            result = session.attach(ref, store, transport, poll_s=poll, on_progress=live.latency if live else None,
                                    on_connection=_notice(live, host) if live and host else _plain_notice(host))
    except session.LetGo as e:
        err_console().print(hint(host, e.run_id))
        return 130
    finally:
        transport.close()
    return show_run(result, store, as_json)
