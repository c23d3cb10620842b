"""How the suite runs on every core, and what each run cost.

Groups.  `make test` and `make check` run tests side by side on every core
(pytest-xdist, --dist loadgroup).  Tests that share something made once, or
a part of this machine, run one after the other on one worker: each group
below is a unit of work xdist gives to one worker whole.

    kernels  the e2e kernel tests: the session's test kernels and the build
             trees they share (tests/support/testkernels.py)
    guests   the QEMU PC guests: the image, the one RT deploy of the session
             and the guests booted from it (tests/support/guest.py, rtguest.py)
    board    this machine as the board over the loopback sshd: its
             /var/lib/rtforge (runs, the active run, the monitor's program),
             which the `board` fixture cleans up whole

The `machine` tests (this machine's own tuning) run alone afterwards, in a
pytest of their own (Makefile).

The budget.  At the end of every run: the wall time, and per tier (unit,
integration, e2e) the tests and the time they took (setup, call and
teardown; two workers take more test time than wall time), then every
test over SLOW_S with its phases together (docs/testing.md's table of what
each slow test proves); --durations lists the slowest phases, so a change
that makes the suite slower shows in its own log.  docs/testing.md has the goals and the figures measured.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

_GUEST_FIXTURES = {"guest_image", "guest", "rt_guest_image", "rt_guest", "pc"}
_BOARD_FIXTURES = {"sshd", "board", "link"}

_started = time.monotonic()
_tiers: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])   # tier -> [tests, seconds]
_tests: dict[str, float] = defaultdict(float)                     # test -> seconds, its phases together
# docs/testing.md's table says what each test over this proves, with its time
SLOW_S = 20.0


def group_of(item) -> str | None:
    names = set(getattr(item, "fixturenames", ()))
    if item.nodeid.startswith("tests/e2e/") and item.get_closest_marker("kernel"):
        return "kernels"
    if names & _GUEST_FIXTURES:
        return "guests"
    if names & _BOARD_FIXTURES:
        return "board"
    return None


def mark_groups(items) -> None:
    for item in items:
        group = group_of(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def _tier(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_runtest_logreport(report) -> None:
    """Every phase of every test (with xdist, as the workers report them)."""
    t = _tiers[_tier(report.nodeid)]
    t[1] += report.duration
    _tests[report.nodeid.split("@")[0]] += report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        t[0] += 1


def pytest_terminal_summary(terminalreporter) -> None:
    if not _tiers:
        return
    wall = time.monotonic() - _started
    workers = getattr(terminalreporter.config.option, "numprocesses", None) or 1
    tr = terminalreporter
    tr.section("budget")
    tr.write_line(f"wall {wall / 60:.1f} min on {workers} worker{'s' if workers != 1 else ''}; per tier, "
                  "the tests and their time (setup + call + teardown):")
    for tier in ("unit", "integration", "e2e", "other"):
        if tier in _tiers:
            n, s = _tiers[tier]
            tr.write_line(f"  {tier:<12} {n:>5} tests {s / 60:7.1f} min")
    slow = sorted(((s, n) for n, s in _tests.items() if s >= SLOW_S), reverse=True)
    if slow:
        tr.write_line(f"tests over {SLOW_S:.0f} s, setup (a shared fixture's making, for the first test to ask "
                      "for it) + call + teardown:")
        for seconds, nodeid in slow:
            tr.write_line(f"  {seconds:7.1f} s  {nodeid}")
    tr.write_line("goals (docs/testing.md): .ci/run cold <= 45 min, warm <= 25 min; make check <= 2 min")
