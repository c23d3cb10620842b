"""rtforge import: cyclictest outputs people already have, into the run store."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import UserError
from ..preempt import PREEMPT_MODELS
from ..results.stats import show_dict
from ..results.store.runstore import Store
from ..units import shown
from .common import RESULTS_DIR, check_label
from .render import make_console, print_result

if TYPE_CHECKING:
    from ..results.importers import Stated

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


LOAD_WORD = re.compile(r"[A-Za-z0-9_.+-]{1,40}")


def stated(kernel: str | None, preempt: str | None, load: str | None, priority: int | None) -> Stated:
    """The import options, checked: one sentence for each thing that is wrong."""
    if kernel is not None and not re.fullmatch(r"[A-Za-z0-9._+~-]{1,100}", kernel):
        raise UserError(f"--kernel '{shown(kernel)}' is not a kernel release like 6.12.0-rt5-v8+ (uname -r)")
    if preempt is not None and preempt not in PREEMPT_MODELS:
        raise UserError(f"--preempt '{shown(preempt)}' is not a preemption model: choose {', '.join(PREEMPT_MODELS)}")
    loads = None
    if load is not None:
        words = [w.strip() for w in load.split(",")]
        if load.strip() == "none":
            loads = []
        elif len(words) > 10 or not all(LOAD_WORD.fullmatch(w) for w in words):
            raise UserError(f"--load '{shown(load)}' is not a list of load names: give words such as cpu,io,net "
                            "(or none)")
        else:
            loads = words
    if priority is not None and not 0 <= priority <= 99:
        raise UserError(f"--priority {priority} is out of range: 0 (SCHED_OTHER) to 99")
    from ..results.importers import Stated  # the importers load numpy: not for every command's --help

    return Stated(kernel, preempt, loads, priority)


@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="cyclictest output: text (-h N -q, -H, -N, summary lines), --json file, "
                                          "or the time,core1,... CSV made from its histogram"),
    label: str | None = typer.Option(None, "--label", help="a name for this run, e.g. 'Pi 4 stock 4.19'"),
    kernel: str | None = typer.Option(None, "--kernel", help="the measured kernel's release (uname -r), when the "
                                         "file does not say it"),
    preempt: str | None = typer.Option(None, "--preempt", help=f"its preemption model: {', '.join(PREEMPT_MODELS)}"),
    load: str | None = typer.Option(None, "--load", help="the load it ran under, e.g. cpu,io,net, or none"),
    priority: int | None = typer.Option(None, "--priority", help="the measuring threads' priority (0: "
                                           "SCHED_OTHER), when the file does not say it", min=None),
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON (as `show --json`)"),
) -> None:
    """Import a cyclictest output file as a run (the same file only once).

    FILE is cyclictest's text output (-h N -q, -H N, -N, --spike, -b, or only
    its status lines or its '#' summary lines), its --json file, or the
    time,core1,... CSV made from its histogram with grep, tr and sed.
    What the file does not say stays unknown ('?') unless an option says it.
    """
    from ..results.importers import import_file

    facts = stated(kernel, preempt, load, priority)
    store = Store(results_dir)
    result = import_file(file, store, label=check_label(label) or None if label is not None else None, stated=facts)
    if as_json:
        print(json.dumps(show_dict(result), indent=1))
        return
    console = make_console()
    print_result(result, console)
    source = result.source or {}   # an import always records its source
    console.print(f"imported {source.get('format', '?')} from {file} as {result.run_id} in {store.root}", style="dim")
    if how := source.get("start_time_from"):
        # the run's id and its place among the runs come from it: never silently
        when = "the file's modification time" if how == "mtime" else "the time of the import"
        console.print(f"the file states no start time: {when}, {result.start_time.replace('+00:00', 'Z')}, is "
                      "taken as the run's (its id holds it)", style="dim", highlight=False)
