"""Helpers for the remote-run tests: the loopback sshd is the board, so the
board's run directories are this machine's /var/lib/rtforge/runs/...

Processes on the "board" (and of a run on this machine, the same runner)
are found by session: the runner, the engine and every load each lead a
session of their own (setsid); their ids are in the run's raw/runner/
files, on the board or in the store.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from pathlib import Path

from rtforge.measure.runner import BASE_DIR

from .procs import pids, proc_stat, start_cli  # noqa: F401 (start_cli: the remote tests start rtforge with it)

RUNS = Path(BASE_DIR) / "runs"


def session_members(sids: set[int]) -> list[int]:
    """Live (non-zombie) processes in any of these sessions."""
    return [pid for pid in pids() if (st := proc_stat(pid)) and st.state != "Z" and st.session in sids]


def _runner_dir(run_dir: Path) -> Path:
    """Where the runner's pid files are: raw/runner/ of a run's folder (on
    the board, or in the store), or the folder itself when given that."""
    return run_dir / "raw" / "runner" if (run_dir / "raw" / "runner").is_dir() else run_dir


PID_FILES = ("runner.pid", "engine.pid", "monitor.pid", "loads.pids", "loads.stopped")


def run_sessions(run_dir: Path) -> set[int]:
    """Session ids of a run's runner, engine and loads, from its files."""
    sids = set()
    for f in PID_FILES:
        p = _runner_dir(run_dir) / f
        if p.exists():
            sids |= {int(line.split()[0]) for line in p.read_text().splitlines() if line.strip()}
    return sids


def live_sessions(run_dir: Path) -> set[int]:
    """The run's sessions whose leader is still the process it recorded
    ("PID START_TICKS ..."): a leftover from an earlier boot or a long-gone
    run names pids that may belong to anyone now."""
    live = set()
    for f in PID_FILES:
        p = _runner_dir(run_dir) / f
        for line in (p.read_text().splitlines() if p.exists() else []):
            fields = line.split()
            st = proc_stat(fields[0]) if fields and fields[0].isdigit() else None
            if st and len(fields) > 1 and st.start_ticks == fields[1]:
                live.add(st.pid)
    return live


def wait_gone(sids: set[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and session_members(sids):
        time.sleep(0.1)
    return session_members(sids)


def wait_for(predicate, timeout: float = 20.0, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")


def board_state(run_id: str) -> str:
    p = RUNS / run_id / "raw" / "runner" / "state"
    return p.read_text().strip() if p.exists() else ""


def pid_of(path: Path) -> int:
    return int(path.read_text().split()[0])


def clean_board(before: set[str]) -> list[str]:
    """Stop and remove every run directory created since `before`; returns
    what was left behind (a failing test's leftovers are cleaned anyway)."""
    left = []
    if not RUNS.exists():
        return left
    for d in RUNS.iterdir():
        if d.name in before:
            continue
        left.append(d.name)
        sids = live_sessions(d)
        for sid in sids:
            try:
                os.killpg(sid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in session_members(sids):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(d, ignore_errors=True)
    active = Path(BASE_DIR) / "active"
    if active.is_symlink() and os.readlink(active) not in before:
        active.unlink()
    return left


def cli_env(tmp_path: Path) -> tuple[dict, str]:
    tag = uuid.uuid4().hex
    return {**os.environ, "RTFORGE_TEST_TAG": tag, "RTFORGE_RESULTS_DIR": str(tmp_path / "results")}, tag


def tagged(tag: str, comm: str | None = None) -> list[int]:
    """Host processes carrying the test's environment tag (rtforge, ssh, ping)."""
    found = []
    for pid in pids():
        try:
            if f"RTFORGE_TEST_TAG={tag}".encode() not in Path(f"/proc/{pid}/environ").read_bytes():
                continue
        except OSError:
            continue
        st = proc_stat(pid)
        if st and st.state != "Z" and (comm is None or st.comm == comm):
            found.append(pid)
    return found
