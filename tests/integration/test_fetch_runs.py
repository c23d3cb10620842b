"""`rtforge fetch`'s loop is the run lifecycle's (measure/session.fetch_runs):
on a board's folder -- here a folder of this machine, reached through a
LocalTransport, with the board's layout -- every run whose runner is gone is
collected (verified, stored, removed there), one that measured nothing is
removed and said, and one still measuring is left to `attach`."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime

import pytest

from rtforge.device import LocalTransport
from rtforge.measure.lifecycle import owner_of, runner_text
from rtforge.measure.runner import NothingMeasured
from rtforge.measure.session import fetch_runs
from rtforge.results.model import RunResult

from ..conftest import run_probe

pytestmark = pytest.mark.root


def board_run(base, run_id: str, state: str | None, *, measured=None, runner_pid: str | None = None):
    """A run folder as the runner leaves it on a board: its runner.sh and run.json,
    its final state, the engine's files (from `measured`, a folder) and its pid file."""
    d = base / "runs" / run_id
    (d / "raw" / "runner").mkdir(parents=True)
    (d / "runner.sh").write_text(runner_text())
    result = RunResult(run_id=run_id, engine="probe", state="running", host="board",
                       start_time=datetime.now(UTC).isoformat(timespec="seconds"),
                       config={"interval_us": 1000, "priority": 90, "policy": "fifo", "loads": []})
    (d / "raw" / "runner" / "run.json").write_text(result.to_json())
    if state:
        (d / "raw" / "runner" / "state").write_text(state + "\n")
    if runner_pid:
        (d / "raw" / "runner" / "runner.pid").write_text(runner_pid)
    if measured:
        for f in measured.iterdir():
            shutil.copy(f, d / "raw" / f.name)
    for p in (d, *d.rglob("*")):
        p.chmod(0o700 if p.is_dir() else 0o600)
    return d


def test_fetch_collects_what_ended_removes_what_measured_nothing_and_leaves_what_runs(probe, tmp_path, store):
    base = tmp_path / "board"
    (base / "runs").mkdir(parents=True, mode=0o700)
    base.chmod(0o755)
    measured = tmp_path / "measured"
    r = run_probe(probe, "--out", measured, "--duration-s", "1", "--interval-us", "1000", "--checkpoint-s", "1")
    assert r.returncode == 0, r.stderr
    done_id, empty_id, live_id = (f"20261122-14540{n}-board-000{n}" for n in (1, 2, 3))
    board_run(base, done_id, "done", measured=measured)
    board_run(base, empty_id, "failed the engine could not start")
    me = owner_of(os.getpid())   # a runner that lives: this process, by pid, start ticks and boot
    board_run(base, live_id, "running", runner_pid=f"{os.getpid()} {me['start_ticks']} {me['boot_id']}\n")

    done = fetch_runs(store, LocalTransport(), base=str(base))
    assert [r.run_id for r in done.results] == [done_id] and done.results[0].state == "complete"
    assert store.load(done_id).cpus and json.loads((store.run_dir(done_id) / "result.json").read_text())
    assert done.running == [live_id]
    assert len(done.empty) == 1 and done.empty[0].startswith(f"run {empty_id} on this machine measured nothing")
    assert "failed the engine could not start" in done.empty[0]
    assert sorted(p.name for p in (base / "runs").iterdir()) == [live_id]   # the ended ones are off the board

    with pytest.raises(NothingMeasured):   # asked for by name, a run that measured nothing is an error
        board_run(base, empty_id, "done")
        fetch_runs(store, LocalTransport(), empty_id[:17], base=str(base))
    assert sorted(p.name for p in (base / "runs").iterdir()) == [live_id]
