"""`rtforge monitor` on a board over SSH: the loopback sshd (a real OpenSSH
server on this machine) as the board.  The probe is built, uploaded and
checked there, measures in the foreground, its windows come back over the
session as they close and are fetched into the store; a login that needs
sudo works, and a dropped link stops the probe on the board cleanly
instead of leaving it running for nobody."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.monitor.spec import PROGRAM
from rtforge.results.soak.windows import read_events, read_windows

from ..support.procs import start_cli

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture
def board_dirs():
    """The board is this machine: the probe it installs (PROGRAM) and the
    monitor's folder are removed afterwards, unless they were here before."""
    made = [p for p in (Path(PROGRAM).parent, Path(PROGRAM)) if not p.exists()]
    state = Path(tempfile.mkdtemp(prefix="rtforge-monitor-board-"))
    state.chmod(0o755)  # a login that is not root reads it, as /var/lib/rtforge-monitor is read
    yield state / "mon"
    shutil.rmtree(state, ignore_errors=True)
    for p in reversed(made):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def test_run_on_a_board_fetch_status_and_no_service_without_systemd(sshd, board_dirs, tmp_path, capsys):
    """As a login that is not root: sudo for the probe, plain reads for the rest."""
    state, ssh = board_dirs, ["--ssh-config", str(sshd.ssh_config)]
    rd = ["--results-dir", str(tmp_path / "results")]
    assert main(["monitor", "run", "board-sudo", "--window", "1s", "--for", "3s", "--state-dir", str(state),
                 *ssh]) == 0
    out, err = capsys.readouterr()
    windows = read_windows(state)
    assert len(out.splitlines()) == len(windows) >= 3
    assert (f"{len(windows)} windows kept in {state} on board-sudo: "
            f"`rtforge monitor fetch board-sudo --state-dir {state}` brings them into the store") in err
    assert Path(PROGRAM).is_file()  # uploaded where the service would run it

    assert main(["monitor", "fetch", "board-sudo", "--state-dir", str(state), *ssh, *rd]) == 0
    host = os.uname().nodename
    assert re.match(rf"{re.escape(host)}: {len(windows)} new windows", capsys.readouterr().out)
    fetched = tmp_path / "results" / "monitor" / host
    assert [w.key for w in read_windows(fetched)] == [w.key for w in windows]
    assert main(["monitor", "status", "board-sudo", "--state-dir", str(state), *ssh]) == 0
    status = capsys.readouterr().out
    assert "monitor on board-sudo: not running" in status and f"windows recorded: {len(windows)}" in status
    if not Path("/run/systemd/system").exists():
        assert main(["monitor", "start", "board", *ssh]) == 2
        assert "board does not run systemd, so the monitor cannot be a service there: `rtforge monitor run " \
               "board` measures the same way in the foreground" in capsys.readouterr().err


def test_a_dropped_link_stops_the_probe_on_the_board_cleanly(sshd, board_dirs, tmp_path):
    state = board_dirs
    # as root: the loopback sshd's cut ends a root session's TCP connection (a
    # non-root session's unprivileged child would keep it)
    p = start_cli({**os.environ, "RTFORGE_RESULTS_DIR": str(tmp_path / "results")}, "monitor", "run",
                  "board", "--window", "1s", "--state-dir", str(state), "--ssh-config", str(sshd.ssh_config))
    try:
        for _ in range(2):
            assert p.stdout.readline(), p.stderr.read()
        sshd.cut_connections()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 2 and "Traceback" not in err
    assert "the connection to board dropped" in err and "windows kept in" in err
    # on the board: the probe got its SIGTERM, closed its last window and recorded its stop
    deadline = time.monotonic() + 30
    while "running 0" not in (state / "state").read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert read_events(state)[-1]["event"] == "stop" and read_events(state)[-1]["reason"] == "SIGTERM"
    assert read_windows(state)[-1].partial
