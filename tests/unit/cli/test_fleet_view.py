"""The fleet's live table, as an 80-column terminal shows it while boards
are measured: a board's long error is cut, never the board's name."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

from rich.console import Console

from rtforge.cli.fleet import _View
from rtforge.fleet.status import Live


def test_a_long_error_is_cut_and_every_board_keeps_its_name():
    hosts = ["pi-cnc-01", "pi-lab-rack-b2"]
    view = _View(SimpleNamespace(todo=hosts, forks=5), "measuring")
    now = time.monotonic()
    view.live = {"pi-cnc-01": Live("pi-cnc-01", state="working", since=now - 12, attempt=1),
                 "pi-lab-rack-b2": Live("pi-lab-rack-b2", state="retrying", since=now - 3, outcome="unreachable",
                                        message="cannot reach pi-lab-rack-b2 over SSH (ssh: connect to host "
                                                "127.0.0.1 port 2298: Connection refused); " * 2)}
    view.console = console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(view._table())
    lines = console.file.getvalue().splitlines()
    assert lines[1].split()[:3] == ["pi-cnc-01", "12", "s"]
    assert lines[2].split()[:3] == ["pi-lab-rack-b2", "3", "s"] and lines[2].rstrip().endswith("…")
