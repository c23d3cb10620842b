"""What several commands share: options declared once, the one progress
widget, and how a finished run is shown."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar

from ..errors import UserError
from ..measure import lifecycle
from ..measure.options import OPTIONS
from ..results.display import clean
from ..results.model import MAX_LABEL, RunResult
from ..results.stats import show_dict
from ..results.store.runstore import Store
from .render import make_console, print_result, us

RESULTS_DIR = typer.Option(None, "--results-dir", envvar="RTFORGE_RESULTS_DIR",
                           help="run store (default: XDG data dir)")
SSH_CONFIG = typer.Option(None, "--ssh-config", help="ssh client config file (ssh -F), e.g. for a Host alias")
JSON = typer.Option(False, "--json", help="print the result summary as JSON (as `show --json`)")
HOST_OPTIONAL = ("the board, over SSH: USER@HOST, HOST or a Host alias of your ssh config "
                 "(default: this machine)")
HOST_REQUIRED = "the board, over SSH: USER@HOST, HOST or a Host alias of your ssh config; 'local' for this machine"
RUN_HELP = "a run: its id, a unique prefix of one, its label, or 'last'"
# seconds between progress polls (tests poll faster); checked like every number
POLL = typer.Option(None, "--poll-s", hidden=True, help="seconds between progress polls")


def latency_option(name: str, *, fleet: bool = False):
    """A latency option as `rtforge latency` (fleet: `rtforge fleet latency`) takes it, from its one declaration
    (data/latency_options.toml).  Unset is None (a flag: False): rtforge's own default is applied when the
    run is checked, and the fleet leaves a board's variable in charge."""
    o = OPTIONS[name]
    flags = [o.flag, *([o.short] if o.short else [])]
    if o.type == "bool":
        return typer.Option(False, *flags, help=o.help_text(fleet=fleet))
    return typer.Option(None, *flags, metavar=o.value_name, help=o.help_text(fleet=fleet))


def settled_store(results_dir: Path | None, *, check: bool = False) -> Store:
    """The store, with its stale runs settled first (owner gone: finished
    from what they measured) -- once, by each command that shows runs.
    check: every run folder is compared with the index first (`rtforge
    runs`), so a run made 'running' by a hand edit is settled too."""
    store = Store(results_dir)
    if check:
        store.check()
    lifecycle.settle(store)
    return store


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)  # a hint is one line, never cut


class LiveLine:
    """One transient progress line: what is happening, a bar when the total
    is known, a count (steps or bytes) and the elapsed time -- redrawn in
    place on a terminal.  Elsewhere (a CI log, nohup, TERM=dumb) plain lines
    on stderr: one when the step changes, and one every PLAIN_EVERY_S within
    a step, so a 40-minute build is never silent.  The same widget for a
    latency run (`latency`), a benchmark's steps (`bench`) and a kernel
    build's steps (`step`)."""

    PLAIN_EVERY_S = 30.0

    def __init__(self, console: Console, *, count: str | None = None, label: str | None = None):
        columns = [*([TextColumn(label)] if label else []), TextColumn("{task.description}"), BarColumn()]
        if count == "steps":
            columns.append(MofNCompleteColumn())
        elif count == "bytes":
            columns.append(DownloadColumn())
        columns.append(TimeElapsedColumn())
        self.bar = Bar(*columns, console=console, transient=True, disable=not console.is_terminal)
        self.task = self.bar.add_task("", total=None)
        self.what: str | None = None
        # TERM=dumb: a terminal that cannot redraw a line gets the plain lines too
        self.plain = not console.is_terminal or console.is_dumb_terminal
        self.label, self.count = label, count
        self._started = time.monotonic()
        self._said: tuple[float, str] = (0.0, "")

    def __enter__(self) -> LiveLine:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def update(self, description: str, completed: float | None = None, total: float | None = None) -> None:
        self.bar.update(self.task, description=description, completed=completed or 0, total=total)
        if self.plain:
            self._say(description, completed, total)

    def _say(self, description: str, completed: float | None, total: float | None) -> None:
        now = time.monotonic()
        kind = re.sub(r"[0-9.,]+", "#", description)      # a new step, not a new count
        if kind == self._said[1] and now - self._said[0] < self.PLAIN_EVERY_S:
            return
        self._said = (now, kind)
        count = ""
        if completed is not None and total and self.count:   # a run's line says its own "3/10 s"
            count = (f" {completed / 1e6:.0f}/{total / 1e6:.0f} MB" if self.count == "bytes" else
                     f" {completed:.0f}/{total:.0f}")
        label = f"{self.label} " if self.label else ""
        print(f"{label}{description}{count} ({now - self._started:.0f} s)", file=sys.stderr, flush=True)

    # -- the callbacks the library takes -------------------------------------------
    def latency(self, p) -> None:
        """measure.session.Progress: elapsed/total and the max so far per CPU.  The line
        says "measuring" only once wake-ups are measured: before, it names the step
        ("starting the run"), then the loads' settling, which nothing measures."""
        if p.state in ("settling", "starting"):
            self.update("loads settling: nothing measured yet")
            return
        total = f"/{p.total_s:.0f} s" if p.total_s else " s"
        maxes = "  ".join(f"CPU{cpu} max {us(v)} µs" for cpu, v in sorted(p.max_ns.items()))
        done = min(p.elapsed_s, p.total_s or p.elapsed_s)   # the last poll comes after the end: never "6/5 s"
        self.update(f"measuring {done:.0f}{total}  {maxes}", done, p.total_s)

    def bench(self, p) -> None:
        """measure.bench.BenchProgress: the step running, of how many."""
        self.update(p.what, p.step, p.total)

    def step(self, what: str, done: int | None, total: int | None) -> None:
        """A kernel build's steps ('extracting …'), each with its own bar."""
        if what != self.what:
            self.bar.reset(self.task, total=total, description=what)
            self.what = what
        self.update(what, done, total)


def show_run(result: RunResult, store: Store, as_json: bool) -> int:
    """A run, as `show` prints it; exit status 130 for an interrupted one."""
    if as_json:
        print(json.dumps(show_dict(result), indent=1))
    else:
        console = make_console()
        print_result(result, console)
        console.print(f"stored as {result.run_id} in {store.root}", style="dim")
    return 130 if result.state == "interrupted" else 0


def hint(host: str | None, run_id: str, again: bool = True) -> str:
    """How to get back to a run that goes on without us."""
    where, at = (f"on {host}", f"{host} ") if host else ("here", "")
    return (f"the run {run_id} goes on {where}: `rtforge attach {at}{run_id}` follows it{' again' if again else ''} "
            f"and stores it when done; `rtforge latency {at}--stop {run_id}` ends it now")


def check_label(label: str) -> str:
    """A label as given on the command line, checked: at most MAX_LABEL characters, one line."""
    try:  # bytes that are not UTF-8 (argv's surrogate escapes) would be stored as U+FFFD: a label never named again
        label.encode("utf-8")
    except UnicodeEncodeError:
        shown = label.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise UserError(f"the label '{clean(shown)}' holds bytes that are not UTF-8 text (another terminal "
                        "encoding?): give the label in UTF-8") from None
    label = label.strip()
    if len(label) > MAX_LABEL:
        raise UserError(f"the label is {len(label):,} characters long; give one of at most {MAX_LABEL}")
    if not label.isprintable():
        raise UserError(f"the label '{clean(label)}' holds a control character or a line break; give one line of "
                        "text")
    # a reference is read as 'last', then an id or its prefix, then a label (Store.resolve): these never reach a label
    if label == "last":
        raise UserError("the label 'last' could never name its run: 'last' always means the run stored last; "
                        "give another label")
    if ID_LIKE.fullmatch(label):
        raise UserError(f"the label '{clean(label)}' could never name its run: it reads as a run id or the start "
                        "of one (20260101-120000-pi-1a2b); give a label with a word in it, e.g. "
                        f"'{clean(label)} stock'")
    return label


# a run id's start (<date>-<time>-<host>-<hex>, results/store/runstore.py) from any year 2000-2999:
# digits, or a date and on
ID_LIKE = re.compile(r"2[0-9]{0,7}|[0-9]{8}-[0-9A-Za-z._+-]*")
