"""A table into a pipe is written by rtforge itself (render.plain_table),
since rich takes seconds for a store's thousands of runs: the same
characters as rich's table, or rich's own when a cell would wrap."""

from __future__ import annotations

import io

from rich.console import Console

from rtforge.cli.render import fitted, plain_table
from rtforge.cli.runs import RUNS_COLS

ROWS = [
    ["20260101-000000-pi4-lab-0000", "stock 6.12", "probe", "6.12.25-rt8-v8+", "rt", "cpu,io", "600 s", "87.5",
     "21.0", "complete"],
    ["20260101-013000-koen-h400-4t-100M-nort-1a2b", "", "import", "?", "?", "?", "?", "19968.0", "–", "complete"],
    ["20260102-000000-pi5-0002", "µs 試験 ラベル", "cyclictest", "6.1.77-v8+", "none", "–", "5 s", "1.0", "1.0",
     "killed (partial)"],
]


def pipe_console(width: int, encoding: str = "utf-8") -> Console:
    return Console(file=io.TextIOWrapper(io.BytesIO(), encoding=encoding), width=width, force_terminal=False,
                   color_system=None)


def rich_lines(console: Console, rows) -> list[str]:
    with console.capture() as cap:
        console.print(fitted(console, RUNS_COLS, rows))
    return cap.get().splitlines()


def test_the_plain_table_is_richs_character_for_character():
    for width in (200, 120, 80):          # all columns; some dropped
        console = pipe_console(width)
        lines = plain_table(console, RUNS_COLS, ROWS)
        assert lines is not None and lines == rich_lines(console, ROWS), width


def test_rich_draws_what_would_wrap_or_needs_styles_or_ascii():
    long = [[*ROWS[0][:1], "a label long enough that at eighty columns it has to wrap " * 2, *ROWS[0][2:]]]
    assert plain_table(pipe_console(80), RUNS_COLS, long) is None
    assert plain_table(pipe_console(200, "ascii"), RUNS_COLS, ROWS) is None
    terminal = Console(file=io.StringIO(), width=200, force_terminal=True)
    assert plain_table(terminal, RUNS_COLS, ROWS) is None
