"""The suite's own groups reach pytest-xdist's scheduler.

`make test` and `make check` run on every core with --dist loadgroup, and
tests that share a guest, the test kernels or this machine as the board
must run one after the other on one worker (tests/support/budget.py).  If
the marks do not reach xdist (a hook that runs after xdist's, or a pytest
that keeps node ids where xdist no longer writes its group) nothing fails
at once: the groups run on both workers and break each other now and then.
So this runs a small suite through the project's own conftest on two
workers and reads where each test ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SUITE = '''
import json, os, time
from pathlib import Path
import pytest

@pytest.fixture
def board():          # the name is what groups a test; this one is a stand-in
    return None

@pytest.fixture
def guest():
    return None

def _ran(name):
    time.sleep(0.4)   # long enough that a free worker takes the next test
    Path(os.environ["WHERE"], name).write_text(os.environ["PYTEST_XDIST_WORKER"])

def test_board_1(board): _ran("board_1")
def test_board_2(board): _ran("board_2")
def test_board_3(board): _ran("board_3")
def test_guest_1(guest): _ran("guest_1")
def test_guest_2(guest): _ran("guest_2")
def test_free_1(): _ran("free_1")
def test_free_2(): _ran("free_2")
def test_free_3(): _ran("free_3")
'''


@pytest.mark.slow
def test_each_group_runs_on_one_worker_and_the_rest_on_both(tmp_path):
    suite = tmp_path / "suite"
    where = tmp_path / "where"
    suite.mkdir()
    where.mkdir()
    (suite / "test_grouped.py").write_text(SUITE)
    env = dict(os.environ, WHERE=str(where), PYTHONPATH=str(REPO))
    # -p tests.conftest: the project's conftest as a plugin, its hooks as make test has them
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-c", os.devnull,
         "--rootdir", str(suite), "-n", "2", "--dist", "loadgroup", "-q", str(suite)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = {p.name: p.read_text() for p in where.iterdir()}
    assert len(ran) == 8, json.dumps(ran)
    assert len({ran[f"board_{i}"] for i in (1, 2, 3)}) == 1, ran
    assert len({ran[f"guest_{i}"] for i in (1, 2)}) == 1, ran
    assert set(ran.values()) == {"gw0", "gw1"}, ran      # both workers did take work
