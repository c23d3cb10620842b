"""A Ctrl-C that lands while a window's line is being printed: the line is
shown once and the window kept once (a CI run once showed one window twice:
rich had flushed the line, and the interrupt came before it let it go)."""

from __future__ import annotations

import io
import json
import signal
import threading
from types import SimpleNamespace

import pytest
from rich.console import Console

from rtforge.monitor.live import Live, _read


def _line(n: int) -> bytes:
    start = 1_795_788_158_000_000_000 + n * 1_000_000_000
    cpu = {"cpu": 0, "count": 1000, "min_ns": 2000, "max_ns": 9000 + n, "sum_ns": 3_000_000, "overruns": 0,
           "spikes": 0, "h": [[2, 990, 10]]}
    return json.dumps({"v": 1, "life": "ae303ebf-1795788157", "n": n, "start_ns": start,
                       "end_ns": start + 1_000_000_000, "interval_ns": 1_000_000, "window_s": 1,
                       "cpus": [cpu]}).encode() + b"\n"


class _Terminal(io.StringIO):
    """What the user's terminal receives; Ctrl-C comes right after the first flush."""

    def __init__(self):
        super().__init__()
        self.armed = True

    def flush(self):
        super().flush()
        if self.armed:
            self.armed = False
            # to this thread: a process-wide signal may be taken by another thread of the test session
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def test_ctrl_c_right_after_a_flush_shows_and_keeps_each_window_once():
    term = _Terminal()
    console = Console(file=term, width=80)
    live, shown = Live("pi", "/state"), []

    def on_window(w):
        shown.append(w.n)
        console.print(f"window {w.n}", highlight=False)

    with pytest.raises(KeyboardInterrupt):
        _read(SimpleNamespace(stdout=[_line(0), _line(1)]), live, on_window, lambda e: None)
    assert [w.n for w in live.windows] == [0]  # the interrupt acted after window 0, before window 1 was read
    _read(SimpleNamespace(stdout=[_line(1)]), live, on_window, lambda e: None)  # what run() reads after Ctrl-C
    assert term.getvalue() == "window 0\nwindow 1\n"
    assert [w.n for w in live.windows] == shown == [0, 1]


def test_the_window_lines_are_windows():  # the test above would pass on lines _read skips
    live = Live("pi", "/state")
    _read(SimpleNamespace(stdout=[_line(0), b"not json\n", _line(1)]), live, lambda w: None, lambda e: None)
    assert [(w.n, w.max_ns, w.count) for w in live.windows] == [(0, 9000, 1000), (1, 9001, 1000)]
