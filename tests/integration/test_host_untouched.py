"""Tests leave the machine as they found it (issue 22 item 11): the loopback
sshd's logins (tests/support/sshd.py) are created for a test session and
removed at its end, and those of a session killed midway by the next
session.  Checked with real test sessions, run as processes of their own."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ..support.procs import pids, proc_stat
from ..support.remoteboard import wait_for
from ..support.sshd import SUDOERS, remove_stale_users

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
# One quick test that logs in as both of the session's users.
INNER = "tests/integration/test_ssh_transport.py::test_sudo_for_non_root_users"


def rtforge_logins() -> set[str]:
    """The logins, sudo rules, homes and subordinate ids of rtforge's test sessions (any version) here,
    and the sshd folders of this version's."""
    users = {e.pw_name for e in pwd.getpwall() if e.pw_name.startswith("rtforge")}
    rules = {f"sudoers.d/{p.name}" for p in SUDOERS.iterdir() if p.name.startswith("rtforge")}
    homes = {f"home/{p.name}" for p in Path("/home").iterdir() if p.name.startswith("rtforge")}
    ranges = {f"{f}:{line.split(':')[0]}" for f in ("subuid", "subgid") if Path(f"/etc/{f}").exists()
              for line in Path(f"/etc/{f}").read_text().splitlines() if line.startswith("rtforge")}
    folders = {f"tmp/{p.name}" for p in Path(tempfile.gettempdir()).glob("rtforge-sshd-t*")}
    return users | rules | homes | ranges | folders


class Session:
    """A test session of its own, with its own temporary folders (pytest prunes old ones it finds)."""

    def __init__(self, tmp_path: Path):
        self.p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                                   str(tmp_path / "inner"), INNER], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        user = f"rtforge-t{self.p.pid}"
        self.logins = {f"{user}-sudo", f"{user}-nosudo", f"sudoers.d/{user}-sudo", f"home/{user}-sudo",
                       f"home/{user}-nosudo"}

    def wait_for_logins(self) -> None:
        """Until the session has made its logins, and its useradd and usermod
        are done: killed while they write, they would leave /etc/passwd locked."""
        wait_for(lambda: self.logins <= rtforge_logins() or self.p.poll() is not None, timeout=120, step=0.01)
        assert self.logins <= rtforge_logins(), f"the session made no logins of its own: {self.end()}"
        wait_for(lambda: not [st for pid in pids() if (st := proc_stat(pid)) and st.pgrp == self.p.pid
                              and st.comm in ("useradd", "usermod")], timeout=60, step=0.01)

    def end(self) -> str:
        out, _ = self.p.communicate(timeout=300)
        assert self.p.returncode == 0, out
        return out

    def kill(self) -> None:
        """The session, its sshd and its ssh clients, at once: no teardown runs."""
        os.killpg(self.p.pid, signal.SIGKILL)
        self.p.communicate()


@pytest.mark.slow
def test_a_session_removes_the_logins_it_created(tmp_path):
    before = rtforge_logins()
    s = Session(tmp_path)
    s.wait_for_logins()
    s.end()
    assert rtforge_logins() == before


def test_the_logins_of_a_killed_session_are_removed_by_the_next(tmp_path):
    before = rtforge_logins()
    s = Session(tmp_path)
    try:
        s.wait_for_logins()
    finally:
        s.kill()
    assert s.logins <= rtforge_logins()
    remove_stale_users()                          # what the next session does first
    assert rtforge_logins() == before


@pytest.mark.slow
def test_a_live_sessions_logins_are_left_alone(tmp_path):
    """Two sessions at once (two checkouts on one machine) leave each other's logins alone."""
    s = Session(tmp_path)
    try:
        s.wait_for_logins()
        remove_stale_users()
        assert s.logins <= rtforge_logins()
        s.end()                                   # its logins worked to its end
    finally:
        if s.p.poll() is None:
            s.kill()
        remove_stale_users()
    assert not s.logins & rtforge_logins()
