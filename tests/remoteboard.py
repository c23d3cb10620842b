"""Helpers for the remote-run tests: the loopback sshd is the board, so the
board's run directories are this machine's /var/tmp/rtforge/runs/...

Processes on the "board" are found by session: the runner is a session
leader (setsid) with the probe in its session, and every load leads a
session of its own; their ids are in the fetched raw/runner/ files.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rtforge.measure.boardrun import BASE_DIR

RUNS = Path(BASE_DIR) / "runs"


def session_members(sids: set[int]) -> list[int]:
    """Live (non-zombie) processes in any of these sessions."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[3]) in sids:
            found.append(int(name))
    return found


def run_sessions(run_dir: Path) -> set[int]:
    """Session ids of a run's runner and loads, from its files (on the board
    or fetched into raw/runner/)."""
    sids = set()
    for f in ("runner.pid", "loads.pids", "loads.stopped"):
        p = run_dir / f
        if p.exists():
            sids |= {int(line.split()[0]) for line in p.read_text().splitlines() if line.strip()}
    return sids


def live_sessions(run_dir: Path) -> set[int]:
    """The run's sessions whose leader is still the process it recorded
    ("PID START_TICKS ..."): a leftover from an earlier boot or a long-gone
    run names pids that may belong to anyone now."""
    live = set()
    for f in ("runner.pid", "loads.pids", "loads.stopped"):
        p = run_dir / f
        for line in (p.read_text().splitlines() if p.exists() else []):
            fields = line.split()
            try:
                stat = Path(f"/proc/{fields[0]}/stat").read_text()
            except (OSError, IndexError):
                continue
            if len(fields) > 1 and stat[stat.rindex(")") + 2:].split()[19] == fields[1]:
                live.add(int(fields[0]))
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
    p = RUNS / run_id / "state"
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


def start_cli(env: dict, *argv) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rtforge", *argv], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def tagged(tag: str, comm: str | None = None) -> list[int]:
    """Host processes carrying the test's environment tag (rtforge, ssh, ping)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if f"RTFORGE_TEST_TAG={tag}".encode() not in Path(f"/proc/{name}/environ").read_bytes():
                continue
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] == "Z":
            continue
        if comm is None or stat[stat.index("(") + 1:stat.rindex(")")] == comm:
            found.append(int(name))
    return found
