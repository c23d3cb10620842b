"""render.fitted: which columns a table keeps when the terminal is narrow,
read from the table rich prints at that width."""

from __future__ import annotations

import io

from rich.console import Console

from rtforge.cli.render import Col, fitted

COLS = [Col("run", key=True), Col("preempt", drop=4), Col("load", drop=2), Col("max", key=True, right=True)]
ROWS = [["baseline", "full", "none", "2374.3"], ["stressed", "full", "cpu", "7851.0"]]


def printed(width: int, **kw) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(fitted(console, COLS, ROWS, **kw))
    return console.file.getvalue()


def header(text: str) -> list[str]:
    return text.splitlines()[0].replace("┃", " ").split()


def test_every_column_when_there_is_room():
    assert header(printed(80)) == ["run", "preempt", "load", "max"]


def test_a_comparison_drops_what_is_alike_before_what_differs():
    narrow = 34  # room for three columns of the four
    assert header(printed(narrow)) == ["run", "preempt", "max"]                  # by drop order: load goes first
    assert header(printed(narrow, alike_first=True)) == ["run", "load", "max"]   # preempt is alike in every row
    assert "cpu" in printed(narrow, alike_first=True)
