"""rtforge import: cyclictest outputs people already have, into the run store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..results.importers import import_file
from ..results.stats import show_dict
from ..results.store import Store
from . import app
from .render import make_console, print_result
from .common import RESULTS_DIR


@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="cyclictest output: text (-h N -q, -H, -N, summary lines), --json file, "
                                          "or the time,core1,... CSV made from its histogram"),
    label: Optional[str] = typer.Option(None, "--label", help="a name for this run, e.g. 'Pi 4 stock 4.19'"),
    results_dir: Optional[Path] = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON (as `show --json`)"),
) -> None:
    """Import a cyclictest output file as a run (the same file only once).

    FILE is cyclictest's text output (-h N -q, -H N, -N, --spike, -b, or only
    its status lines), its --json file, or the time,core1,... CSV made from
    its histogram with grep, tr and sed.
    """
    store = Store(results_dir)
    result = import_file(file, store, label=label)
    if as_json:
        print(json.dumps(show_dict(result), indent=1))
        return
    console = make_console()
    print_result(result, console)
    console.print(f"imported {result.source['format']} from {file} as {result.run_id} in {store.root}", style="dim")
