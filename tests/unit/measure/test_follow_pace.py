"""How often follow() asks a board about its run: every poll_s while it
measures, more often near its expected end, and a tick after the runner has
said its last word -- never a whole poll for a run that has ended.

The board is a script of answers (what `runner.sh status` said, in order)
and the clock is a counter that sleep() advances: the pacing is judged on
the times at which the answers were asked for, with no real waiting.
"""

from __future__ import annotations

import pytest

from rtforge.measure import session
from rtforge.measure.runner import Poll


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class ScriptedBoard:
    """Answers polls from a list, recording when each was asked."""

    def __init__(self, clock: Clock, answers: list[Poll]):
        self.clock, self.answers, self.asked = clock, list(answers), []

    def poll(self, progress: bool = True) -> Poll:
        self.asked.append(self.clock.now)
        return self.answers.pop(0)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(session, "time", c)
    return c


def test_a_run_that_wrote_done_but_is_still_exiting_is_asked_again_within_a_tick(clock):
    board = ScriptedBoard(clock, [
        Poll("running", "", True, 0.1),
        Poll("running", "", True, 5.1),
        Poll("done", "", True, 10.0),     # the runner wrote its last state and is on its way out
        Poll("done", "", False, 10.2),
    ])
    end = session.follow(board, 10.0, poll_s=5.0)
    assert end.state == "done" and not end.alive
    gaps = [b - a for a, b in zip(board.asked, board.asked[1:])]
    assert gaps[0] == pytest.approx(5.0)            # measuring: a poll every poll_s
    assert gaps[-1] <= session.TICK_S + 1e-9        # ended: a tick, not another 5 s


def test_a_stopping_run_is_watched_by_the_tick(clock):
    board = ScriptedBoard(clock, [Poll("stopping", "SIGTERM", True, 3.0), Poll("interrupted", "SIGTERM", False, 3.4)])
    session.follow(board, 60.0, poll_s=5.0)
    assert board.asked[1] - board.asked[0] <= session.TICK_S + 1e-9


def test_near_the_expected_end_the_board_is_asked_just_after_it(clock):
    board = ScriptedBoard(clock, [Poll("running", "", True, 8.0), Poll("done", "", False, 10.1)])
    session.follow(board, 10.0, poll_s=5.0)
    # 2 s left: asked half a tick after the expected end, not a whole poll later
    assert board.asked[1] - board.asked[0] == pytest.approx(2.0 + session.TICK_S)
