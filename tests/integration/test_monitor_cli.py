"""`rtforge monitor` and `rtforge trend` on this machine, as a user runs
them: a foreground run that prints each window in 80 columns, Ctrl-C that
keeps every window, fetching into the store twice (the second adds
nothing), status, the trend and its plot, and the refusals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.soak.windows import read_events, read_windows

from ..support.procs import holds, start_cli

pytestmark = pytest.mark.root

LINE = re.compile(r"^\d\d:\d\d:\d\d–\d\d:\d\d:\d\d  max +[0-9,.]+ µs \(CPU \d+\)")   # 33,073.4 when loaded


@pytest.mark.slow
def test_run_fetch_status_and_trend_here(tmp_path, capsys):
    state, rd = tmp_path / "mon", ["--results-dir", str(tmp_path / "results")]
    assert main(["monitor", "run", "--window", "1s", "--for", "3s", "--state-dir", str(state)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    windows = read_windows(state)
    assert len(lines) == len(windows) >= 3 and all(LINE.match(x) and len(x) <= 80 for x in lines), out
    assert "partial" in lines[0] and "partial" in lines[-1]
    assert f"{len(windows)} windows kept in {state}: `rtforge monitor fetch --state-dir {state}` brings" in err

    assert main(["monitor", "fetch", "--state-dir", str(state), *rd]) == 0
    host = os.uname().nodename
    assert re.search(rf"^{re.escape(host)}: {len(windows)} new windows \({len(windows)} in the store, ",
                     capsys.readouterr().out)
    assert main(["monitor", "fetch", "--state-dir", str(state), *rd]) == 0
    assert f"{host}: 0 new windows ({len(windows)} in the store" in capsys.readouterr().out
    stored = read_windows(tmp_path / "results" / "monitor" / host)
    assert [w.key for w in stored] == [w.key for w in windows]
    assert [e["event"] for e in read_events(tmp_path / "results" / "monitor" / host)] == ["start", "stop"]

    assert main(["monitor", "status", "--state-dir", str(state), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["running"] is False and doc["windows"] == len(windows) and doc["gaps"] == 0
    assert doc["last_window"]["max_ns"] == windows[-1].max_ns and doc["used_bytes"] > 0

    png = tmp_path / "trend.png"
    assert main(["trend", host, "-o", str(png), "--min-span", "1s", "--min-windows", "1", *rd]) == 0
    out = capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"kernel {os.uname().release}: 0.0 days, {len(windows)} windows, the first kernel seen" in out
    assert "promotion rule: a kernel is promoted after 1s and 1 windows" in out


@pytest.mark.slow
def test_ctrl_c_ends_the_run_and_keeps_every_window(tmp_path):
    state = tmp_path / "mon"
    p = start_cli({**os.environ, "COLUMNS": "80"}, "monitor", "run", "--window", "1s", "--state-dir", str(state))
    shown = []
    try:
        while len(shown) < 2:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            shown.append(line)
        p.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reaches rtforge; the probe is in a session of its own
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    shown += out.splitlines(keepends=True)
    windows = read_windows(state)
    assert len(windows) == len(shown) and windows[-1].partial  # the window Ctrl-C cut short is kept too
    stop = read_events(state)[-1]
    assert stop["event"] == "stop" and stop["reason"] == "SIGTERM"
    assert "Traceback" not in err and f"{len(windows)} windows kept in {state}" in err
    assert "running 0" in (state / "state").read_text()


@pytest.mark.slow
def test_one_monitor_per_folder_and_no_service_without_systemd(probe, tmp_path, capsys):
    state = tmp_path / "mon"
    other = subprocess.Popen([str(probe), "--soak", "--state", str(state), "--window-s", "1", "--duration-s", "8"])
    try:
        holds(state / "lock", other.pid)
        assert main(["monitor", "run", "--window", "1s", "--for", "2s", "--state-dir", str(state)]) == 2
        err = capsys.readouterr().err
        assert err.strip() == (f"rtforge: error: another monitor (pid {other.pid}) is writing {state}: "
                               "one monitor per folder; `rtforge monitor status` shows it")
        # and status shows it: the probe runs as rtforge built it (rtprobe-<machine>), not as the service's rtprobe
        assert main(["monitor", "status", "--state-dir", str(state), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["running"] is True and doc["pid"] == other.pid
    finally:
        other.wait(30)
    if Path("/run/systemd/system").exists():
        return  # this machine runs systemd: the service would be installed, not refused
    assert main(["monitor", "start", "--window", "1m"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "this machine does not run systemd, so the monitor cannot be a service" in err
    assert not Path("/etc/systemd/system/rtforge-monitor.service").exists()


@pytest.mark.slow
def test_fetch_keeps_what_the_board_rotated_away_and_adds_what_came_since(probe, tmp_path, capsys):
    state, rd = tmp_path / "mon", ["--results-dir", str(tmp_path / "results")]
    soak = [str(probe), "--soak", "--state", str(state), "--window-s", "1", "--duration-s", "2"]
    subprocess.run(soak, check=True, capture_output=True)
    assert main(["monitor", "fetch", "--state-dir", str(state), *rd]) == 0
    first = read_windows(state)
    # the board's rotation removes the day file; a second life adds windows, a gap and events
    for f in (state / "windows").iterdir():
        f.unlink()
    (state / "events.jsonl").rename(state / "events.1.jsonl")  # as the probe rotates its events
    subprocess.run(soak, check=True, capture_output=True)
    second = read_windows(state)
    assert main(["monitor", "fetch", "--state-dir", str(state), *rd]) == 0
    out = capsys.readouterr().out
    host = os.uname().nodename
    assert f"{host}: {len(second)} new windows ({len(first) + len(second)} in the store" in out
    stored = tmp_path / "results" / "monitor" / host
    assert [w.key for w in read_windows(stored)] == [w.key for w in first + second]
    assert [e["event"] for e in read_events(stored)] == ["start", "stop", "gap", "start", "stop"]
    cursor = json.loads((stored / "fetch.json").read_text())
    assert all((state / name).exists() for name in cursor["files"])  # nothing of what is gone there
