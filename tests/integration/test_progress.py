"""Progress off a terminal (a CI log, nohup, a pipe, TERM=dumb): plain lines
on stderr, one per step and one every LiveLine.PLAIN_EVERY_S within a step,
so a long build or run is never silent -- and nothing redrawn."""

from __future__ import annotations

import io
import os
import re
import sys

import pytest
from rich.console import Console

from rtforge.cli.common import LiveLine

from ..support.procs import run_on_pty


def test_one_line_per_step_and_one_every_30_s_within_it(monkeypatch, capsys):
    clock = [100.0]
    monkeypatch.setattr("rtforge.cli.common.time.monotonic", lambda: clock[0])
    with LiveLine(Console(file=io.StringIO()), count="steps") as live:     # a file: not a terminal
        live.step("extracting linux.tar.xz", 1, 10)
        live.step("extracting linux.tar.xz", 2, 10)            # same step, no time later: quiet
        clock[0] += 29
        live.step("extracting linux.tar.xz", 3, 10)            # still within 30 s
        clock[0] += 2
        live.step("extracting linux.tar.xz", 5, 10)            # 31 s on: a line
        live.step("configuring", None, None)                    # a new step: at once
    with LiveLine(Console(file=io.StringIO()), count="bytes", label="fetching") as live:
        live.update("downloading", 5_000_000, 165_000_000)
    assert capsys.readouterr().err.splitlines() == [
        "extracting linux.tar.xz 1/10 (0 s)", "extracting linux.tar.xz 5/10 (31 s)", "configuring (31 s)",
        "fetching downloading 5/165 MB (0 s)"]


def test_a_terminal_that_redraws_gets_no_plain_lines(monkeypatch, capsys):
    monkeypatch.setenv("TERM", "xterm")              # CI runs with TERM=dumb
    console = Console(file=io.StringIO(), force_terminal=True)
    assert not console.is_dumb_terminal
    with LiveLine(console) as live:
        live.update("compiling", 1, 2)
    assert capsys.readouterr().err == ""


@pytest.mark.root
@pytest.mark.slow
def test_latency_on_a_dumb_terminal_prints_plain_progress(tmp_path):
    """TERM=dumb on a real pty: rich draws no live line there, so the plain lines say how far the run is."""
    env = {**os.environ, "RTFORGE_RESULTS_DIR": str(tmp_path / "results"), "COLUMNS": "160", "TERM": "dumb"}
    code, text = run_on_pty([sys.executable, "-m", "rtforge", "latency", "--duration", "3s"], env)
    assert code == 0, text[-500:]
    assert re.search(r"^measuring \d+/3 s +CPU0 max [\d,]+\.\d µs.* \(\d+ s\)\r?$", text, re.M), text[-800:]
    assert "stored as" in text


def test_a_run_s_line_says_measuring_only_while_it_measures(capsys):
    """'measuring starting the run' stood on the line while the loads settled."""
    from rtforge.measure.session import Progress

    with LiveLine(Console(file=io.StringIO())) as live:     # the same line as `rtforge latency` draws
        live.update("starting the run")
        live.latency(Progress(0.0, 10.0, state="settling"))
        live.latency(Progress(3.0, 10.0, {0: 41_200}))
    lines = [re.sub(r" \(\d+ s\)$", "", line) for line in capsys.readouterr().err.splitlines()]
    assert lines == ["starting the run", "loads settling: nothing measured yet", "measuring 3/10 s  CPU0 max 41.2 µs"]
