"""rtforge fleet: latency, deploy, doctor, fetch and report for every board
of an Ansible inventory, for those who write no playbook.

Each command checks the inventory and every board's rtforge_* variables
first (exit 2 on bad input, nothing started), then runs the collection's
playbook (fleet/playbook.py), drawing each board's progress from its
events, and ends with a table of what each board came to: exit status 0
when every board is ok, 1 when one is not (unreachable, dropped mid-run,
fell back, not reached).  The same command again resumes: boards whose run
is stored are not measured again, a run that went on without us is
collected.  Ctrl-C lets go of the boards' runs (they go on), keeps the
record and exits 130.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer
from rich.cells import cell_len
from rich.live import Live as RichLive
from rich.table import Table

from .. import paths
from ..errors import UserError
from ..fleet import drive, inventory
from ..fleet.playbook import Interrupted
from ..fleet.status import NOT_REACHED, WORDS, Live, exit_status, result_json
from ..measure.options import OPTIONS
from ..results.store.runstore import Store
from ..units import plural
from . import forkserver
from .common import RESULTS_DIR, err_console, latency_option
from .render import Col, cell, fitted, make_console, shown, us

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


fleet_app = typer.Typer(help="Every board of an Ansible inventory at once: latency, deploy, doctor, fetch, report.",
                        no_args_is_help=True)
app.add_typer(fleet_app, name="fleet")

INVENTORY = typer.Argument(..., metavar="INVENTORY", help="your Ansible inventory (INI or YAML file, or a folder), "
                           "as for ansible-playbook -i")
LIMIT = typer.Option(None, "--limit", metavar="PATTERN", help="only these boards (Ansible's pattern: a group, "
                     "names, wildcards, 'all:!pi-03')")
FORKS = typer.Option(None, "--forks", metavar="N", help="boards worked on at once (default: all, up to 64)")
RETRIES = typer.Option(None, "--retries", metavar="N", help="tries again for a board that cannot be reached "
                       "(default 2, 10 s apart)")
NEW = typer.Option(False, "--new", help="start over: measure every board again instead of resuming")
FJSON = typer.Option(False, "--json", help="print the fleet's result as JSON")


def _load(source: str, limit: str | None) -> inventory.Inventory:
    inventory.require_ansible("rtforge fleet")
    return inventory.load(source, limit)


@fleet_app.command("latency")
def fleet_latency(
    source: str = INVENTORY,
    # the options of a run: each from its one declaration (data/latency_options.toml)
    duration: str | None = latency_option("duration", fleet=True),
    loops: str | None = latency_option("loops", fleet=True),
    interval_us: str | None = latency_option("interval_us", fleet=True),
    priority: str | None = latency_option("priority", fleet=True),
    policy: str | None = latency_option("policy", fleet=True),
    cpus: str | None = latency_option("cpus", fleet=True),
    load: str | None = latency_option("load", fleet=True),
    engine: str | None = latency_option("engine", fleet=True),
    phase: str | None = latency_option("phase", fleet=True),
    spike_us: str | None = latency_option("spike_us", fleet=True),
    histogram_us: str | None = latency_option("histogram_us", fleet=True),
    settle_s: str | None = latency_option("settle_s", fleet=True),
    trace: bool = latency_option("trace", fleet=True),
    install: bool = latency_option("install", fleet=True),
    label: str | None = typer.Option(None, "--label", help="added to each run's label, after the board's "
                                        "inventory name: 'pi-07 RT 6.12'"),
    patience: str | None = latency_option("patience", fleet=True),
    limit: str | None = LIMIT, forks: int | None = FORKS, retries: int | None = RETRIES, new: bool = NEW,
    results_dir: Path | None = RESULTS_DIR, as_json: bool = FJSON,
) -> int:
    """Measure wake-up latency on every board at once, each stored as a run labelled with its inventory name.

    Options given here win over the boards' rtforge_* variables (host and group vars) and rtforge's defaults.
    Run again, it resumes: what finished is collected, nothing stored is measured again."""
    if label is not None and not label.strip():
        raise UserError("--label is empty: leave it out, or give the words to add to each run's label")
    given = {name: value for name, value in locals().items() if name in OPTIONS}   # the declared options
    _check_counts(forks, retries)
    store = Store(results_dir)
    inv = _load(source, limit)
    plan = drive.plan_latency(inv, store, given, label=label, forks=forks, retries=retries, new=new)
    return _run(plan, as_json, "measuring")


@fleet_app.command("deploy")
def fleet_deploy(
    source: str = INVENTORY,
    bundle: Path | None = typer.Argument(None, help="a bundle from `rtforge kernel build` or a linux-image .deb, "
                                            "for every board (default: each board's rtforge_bundle)"),
    official: bool = typer.Option(False, "--official", help="Raspberry Pi's own RT kernel package instead"),
    no_try: bool = typer.Option(False, "--no-try", help="firmware without tryboot (no automatic way back)"),
    timeout: str = typer.Option("5m", "--timeout", metavar="DURATION", help="how long a board may take to come "
                                "back"),
    serial: str = typer.Option("1,25%", "--serial", metavar="BATCHES", help="boards at a time, batch after batch: "
                               "one first, then a quarter of the fleet (Ansible's serial)"),
    limit: str | None = LIMIT, forks: int | None = FORKS, retries: int | None = RETRIES, new: bool = NEW,
    results_dir: Path | None = RESULTS_DIR, as_json: bool = FJSON,
) -> int:
    """Install a kernel on every board, a few at a time; the first board whose kernel falls back stops it.

    Each board is tried once and verified as `rtforge deploy` does; boards already done are not deployed
    again when the command is run again."""
    from ..units import parse_timeout_s
    parse_timeout_s(timeout)
    _check_counts(forks, retries)
    store = Store(results_dir)
    inv = _load(source, limit)
    plan = drive.plan_deploy(inv, store, bundle, official=official, no_try=no_try, timeout=timeout, serial=serial,
                             forks=forks, retries=retries, new=new)
    return _run(plan, as_json, "deploying")


@fleet_app.command("doctor")
def fleet_doctor(
    source: str = INVENTORY,
    window_s: float | None = typer.Option(None, "--window-s", help="seconds over which threads' CPU use is "
                                             "measured (0: skip)"),
    isolate: str | None = typer.Option(None, "--isolate", metavar="CPUS", help="CPUs meant for RT work"),
    limit: str | None = LIMIT, forks: int | None = FORKS,
    results_dir: Path | None = RESULTS_DIR, as_json: bool = FJSON,
) -> int:
    """What hurts latency on every board: the count of findings per board, each board's report kept for
    `rtforge fleet report`."""
    if window_s is not None and not 0 <= window_s <= 3600:
        raise UserError(f"--window-s {window_s:g} is out of range: use 0 to 3600")
    _check_counts(forks, None)
    store = Store(results_dir)
    inv = _load(source, limit)
    extra = {k: v for k, v in (("rtforge_window_s", window_s), ("rtforge_isolate", isolate)) if v is not None}
    return _run(drive.plan_simple("doctor", inv, store, extra, forks), as_json, "examining")


@fleet_app.command("fetch")
def fleet_fetch(
    source: str = INVENTORY, limit: str | None = LIMIT, forks: int | None = FORKS,
    results_dir: Path | None = RESULTS_DIR, as_json: bool = FJSON,
) -> int:
    """Bring every board's finished and partial runs into the store (and off the boards)."""
    _check_counts(forks, None)
    store = Store(results_dir)
    inv = _load(source, limit)
    return _run(drive.plan_simple("fetch", inv, store, {}, forks), as_json, "fetching")


@fleet_app.command("report")
def fleet_report(
    source: str = INVENTORY,
    output: Path = typer.Option(..., "--output", "-o", metavar="FILE", help="the HTML file to write, e.g. fleet.html"),
    cycle_time: str | None = typer.Option(None, "--cycle-time", metavar="TIME", help="judge every board for this "
                                             "cycle (default: each board's rtforge_cycle_time)"),
    limit: str | None = LIMIT, results_dir: Path | None = RESULTS_DIR,
) -> int:
    """One HTML page: a row per board (its verdict for its own cycle time, worst case, kernel, RT or not,
    last seen) and a section per board.  Reads the store and the fleet records: no board is contacted."""
    from ..device.doctor.findings import severity_counts
    from ..fleet.evidence import gather
    from ..report.fleet import write_html
    from ..report.verdict import parse_cycle_time
    if cycle_time is not None:
        parse_cycle_time(cycle_time)
    if output.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"the fleet report is HTML: name it {output.with_suffix('.html').name}, not {output.name}")
    store = Store(results_dir)
    inv = _load(source, limit)
    entries = gather(inv, store, cycle_time)
    out = write_html(entries, inv.source, cycle_time, output, lambda counts: severity_counts(counts, ", "))
    judged = sum(1 for e in entries if e.run is not None)
    make_console().print(f"wrote {shown(out)}: {plural(len(entries), 'board')}, {judged:,} with a latency run",
                         highlight=False)
    return 0


def _check_counts(forks: int | None, retries: int | None) -> None:
    if forks is not None and not 1 <= forks <= 1000:
        raise UserError(f"--forks {forks} is out of range: use 1 to 1000 boards at once")
    if retries is not None and not 0 <= retries <= 100:
        raise UserError(f"--retries {retries} is out of range: use 0 to 100")


# -- the play, as it goes and when it ends ------------------------------------------------------------------
def _run(plan: drive.Plan, as_json: bool, doing: str) -> int:
    err = err_console()
    c = plan.campaign
    hosts = plan.inventory.hosts
    done = [h for h in hosts if h not in plan.todo]
    if plan.resumed:
        err.print(f"resuming {c.id} (started {c.started}): {len(done)} of {plural(len(hosts), 'board')} done, "
                  f"{len(plan.todo)} to go; --new starts over", highlight=False)
    for note in plan.notes:
        err.print(note, highlight=False)
    view = _View(plan, doing)
    try:
        with view:
            tracker = drive.play(plan, view.update, forkserver.serve_argv)
    except Interrupted:
        err.print(f"interrupted: what each board came to is kept in {c.dir}; a board's run goes on there, and "
                  "the same command again collects it", highlight=False)
        return 130
    if plan.command == "doctor":
        _keep_reports(plan, tracker.results)
    records = [c.board(h) for h in hosts]
    extra = {h: _extra(plan.command, tracker.results.get(h) or {}) for h in hosts}
    if as_json:
        print(json.dumps(result_json(c, hosts, plan.resumed, extra), indent=1))
    else:
        _summary(plan, extra)
    return exit_status(records)


def _extra(command: str, result: dict) -> dict:
    if command == "doctor":
        return {"counts": result.get("counts") or {}}
    if command == "fetch":
        return {"fetched": [r.get("run_id") for r in result.get("runs") or []], "running": result.get("running") or []}
    if command == "deploy":
        return {"steps": result.get("steps") or []}
    return {}


def _keep_reports(plan: drive.Plan, results: dict[str, dict]) -> None:
    folder = plan.campaign.dir / "doctor"
    folder.mkdir(exist_ok=True)
    for host, r in results.items():
        if isinstance(r.get("report"), dict):
            paths.write_atomic(folder / f"{host}.json", json.dumps(r["report"], indent=1) + "\n")


class _View:
    """Each board's line while the play runs: a table redrawn in place on a terminal, else one line per
    change on stderr (a CI log, cron)."""

    def __init__(self, plan: drive.Plan, doing: str):
        self.plan, self.doing = plan, doing
        self.live: dict[str, Live] = {h: Live(h) for h in plan.todo}
        self.console = err_console()
        self.tty = self.console.is_terminal and not self.console.is_dumb_terminal
        self.rich = RichLive(console=self.console, refresh_per_second=2, transient=True,
                             get_renderable=self._table) if self.tty and plan.todo else None
        self.t0 = time.monotonic()

    def __enter__(self):
        if self.rich:
            self.rich.__enter__()
        self.said_what = False   # plain lines: the first board's start says what the play does
        return self

    def __exit__(self, *exc):
        if self.rich:
            self.rich.__exit__(*exc)

    def update(self, b: Live) -> None:
        self.live[b.host] = b
        if not self.rich:
            if not self.said_what:
                n = len(self.plan.todo)
                print(f"{self.doing} {n} board{'s' if n != 1 else ''} ({self.plan.forks} at once)", file=sys.stderr)
                self.said_what = True
            print(f"{b.host}: {self._state(b)}", file=sys.stderr, flush=True)

    def _state(self, b: Live) -> str:
        if b.state == "working":
            return self.doing + (f" (try {b.attempt})" if b.attempt > 1 else "")
        if b.state == "retrying":
            return f"{WORDS.get(b.outcome or '', b.outcome or '')}, trying again: {b.message}"
        if b.state == "done":
            return _outcome_text(b.outcome, b.run_id, b.summary, b.message)
        return "waiting"

    def _table(self) -> Table:
        t = Table(show_edge=False, box=None, header_style="bold")
        # the board and its time keep their width: a long message is what gets cut ("…"), never the name
        name = min(max([len("board")] + [cell_len(h) for h in self.plan.todo]), 20)
        t.add_column("board", no_wrap=True, min_width=name, max_width=20)
        t.add_column("time", justify="right", no_wrap=True, min_width=6)
        # rich squeezes every column of a table too wide, so the state's width is set: what the others leave
        t.add_column("state", overflow="ellipsis", no_wrap=True,
                     max_width=max(self.console.width - name - 6 - 3 * 2, 10))  # a cell's padding: 1 + 1
        for h in self.plan.todo:
            b = self.live[h]
            secs = f"{time.monotonic() - b.since:.0f} s" if b.since and b.state != "done" else ""
            t.add_row(cell(h), secs, cell(self._state(b)))
        return t


def _outcome_text(outcome: str | None, run_id: str | None, summary: dict, message: str) -> str:
    word = WORDS.get(outcome or NOT_REACHED, outcome or NOT_REACHED)
    if outcome == "ok" and summary.get("max_ns") is not None:
        return f"ok · max {us(summary['max_ns'])} µs · {run_id}"
    if outcome == "ok":
        return "ok" + (f" · {message}" if message else "")
    return f"{word}: {message}" if message else word


SUMMARY_COLS = [Col("board", key=True), Col("result", key=True), Col("max µs", drop=3, right=True),
                Col("kernel", drop=1), Col("run", drop=2), Col("what happened", wrap=True, min_width=20, drop=4)]


def _summary(plan: drive.Plan, extra: dict[str, dict]) -> None:
    console = make_console()
    c = plan.campaign
    rows = []
    for h in plan.inventory.hosts:
        r = c.board(h)
        s = r.summary or {}
        what = r.message
        if plan.command == "doctor" and extra[h].get("counts"):
            n = extra[h]["counts"]
            from ..device.doctor.findings import severity_counts

            what = severity_counts(n, ", ")
        elif plan.command == "fetch" and r.outcome == "ok":
            what = f"fetched {len(extra[h]['fetched'])}" + (f", still running: {', '.join(extra[h]['running'])}"
                                                            if extra[h]["running"] else "")
        rows.append([h, WORDS.get(r.outcome or NOT_REACHED, r.outcome or NOT_REACHED),
                     us(s.get("max_ns")) if s.get("max_ns") is not None else "–", s.get("kernel_release") or "–",
                     r.run_id or "–", what or ""])
    console.print(fitted(console, SUMMARY_COLS, rows))
    counts: dict[str, int] = {}
    for h in plan.inventory.hosts:
        word = WORDS.get(c.board(h).outcome or NOT_REACHED, "?")
        counts[word] = counts.get(word, 0) + 1
    text = ", ".join(f"{n} {w}" for w, n in sorted(counts.items(), key=lambda kv: (kv[0] != "ok", kv[0])))
    console.print(f"{plural(len(plan.inventory.hosts), 'board')}: {shown(text)} · record {shown(c.dir)}",
                  highlight=False)
    if any(not c.board(h).done for h in plan.inventory.hosts) and plan.command in ("latency", "deploy"):
        console.print("the same command again resumes: boards done are left alone", style="dim")
