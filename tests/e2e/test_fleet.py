"""A fleet, end to end, with the real parts: nine boards in an inventory,
eight of them real sshds on loopback (each its own host name and
/var/lib/rtforge: tests/support/fleetboards.py) and one whose port nothing
listens on; real ansible-playbook with the shipped collection; real probes.
One board is cut off the network mid-run and comes back only later.

Nothing measured is lost: the reachable boards' runs are stored, labelled
with their inventory names; the cut board's run goes on there and the same
command, run again -- while it is still down, then once it is back --
collects it without measuring anyone again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtforge.results.store.runstore import Store

from ..support.fleetboards import Rack
from ..support.procs import pids

pytestmark = [pytest.mark.root, pytest.mark.slow]
BOARDS = 8
CUT = "pi-05"


@pytest.fixture
def rack():
    r = Rack.start(BOARDS)
    yield r
    r.stop()


def fleet(env, *argv, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rtforge", "fleet", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def descendants_alive(env_tag: str) -> list[int]:
    """Processes this test's rtforge left on this machine (found by their environment)."""
    found = []
    for pid in pids():
        try:
            if env_tag.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def test_eight_boards_one_unreachable_one_cut_mid_run_then_resumed(rack, tmp_path):
    inv = rack.inventory(tmp_path / "lab.ini", groups={"bench": ["pi-01", "pi-02", "pi-03", "pi-04"],
                                                       "line": ["pi-05", "pi-06", "pi-07", "pi-08"]},
                         extra_lines=f"[far]\npi-09 ansible_host=127.0.0.1 ansible_port={rack.dead_port}\n",
                         group_vars="rtforge_interval_us=1000\nrtforge_cycle_time=5ms")
    # group and host variables, as a user keeps them beside the inventory
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "line.yml").write_text("rtforge_cpus: '0'\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "pi-08.yml").write_text("rtforge_cycle_time: 20ms\n")
    tag = f"RTFORGE_TEST_FLEET={os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "RTFORGE_RESULTS_DIR": str(tmp_path / "results"), tag.split("=")[0]: tag.split("=")[1]}
    argv = ["latency", str(inv), "--duration", "5s", "--patience", "40s", "--retries", "1", "--json"]

    p = fleet(env, *argv)
    # pi-05 drops off the network once its run measures
    deadline = time.monotonic() + 90
    while not (rack.board_runs(CUT) and rack.board_state(CUT, rack.board_runs(CUT)[0]).startswith("running")):
        assert time.monotonic() < deadline and p.poll() is None, "pi-05's run never started"
        time.sleep(0.1)
    cut_run = rack.board_runs(CUT)[0]
    time.sleep(1)
    rack.cut(CUT)
    t_cut = time.monotonic()
    out, err = p.communicate(timeout=240)
    took = time.monotonic() - t_cut
    assert p.returncode == 1, err
    result = json.loads(out)
    boards = {b["host"]: b for b in result["boards"]}
    assert list(boards) == [f"pi-{i:02d}" for i in range(1, 10)]   # the inventory's order
    assert boards["pi-09"]["outcome"] == "unreachable" and "cannot reach pi-09" in boards["pi-09"]["message"]
    assert boards["pi-09"]["attempts"] == 1                       # one record, after Ansible's retry
    assert boards[CUT]["outcome"] == "lost" and boards[CUT]["run_id"] == cut_run, boards[CUT]
    assert "goes on there" in boards[CUT]["message"]
    ok = [h for h, b in boards.items() if b["ok"]]
    assert ok == [f"pi-{i:02d}" for i in (1, 2, 3, 4, 6, 7, 8)], {h: (b["outcome"], b["message"])
                                                                  for h, b in boards.items()}
    assert result["counts"] == {"ok": 7, "unreachable": 1, "lost": 1}
    assert took < 40 + 60, took                                   # the cut board was given up at its deadline

    store = Store(tmp_path / "results")
    runs = {r.label: r for r in store.all_rows()}
    assert sorted(runs) == ok                                     # labelled with the inventory names
    for h in ok:
        r = store.load(runs[h].run_id)
        assert r.state == "complete" and r.host == h              # each board its own machine (uname -n)
        assert r.config["interval_us"] == 1000
        assert r.config["cpus"] == ([0] if h in ("pi-06", "pi-07", "pi-08") else r.config["cpus"])
        # every 1 ms period of 5 s sampled or counted as missed by the probe
        assert [c.count + c.overruns for c in r.cpus] == [pytest.approx(5 * 1000, rel=0.01)] * len(r.cpus)
        assert boards[h]["run_id"] == r.run_id
        assert rack.board_runs(h) == []                            # fetched, then removed from the board
    assert rack.board_runs(CUT) == [cut_run]                      # the cut board's run goes on there
    # a stored fleet run is a run like any other
    shown = subprocess.run([sys.executable, "-m", "rtforge", "compare", "pi-01", "pi-08", "--json"], env=env,
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert [r["label"] for r in json.loads(shown.stdout)] == ["pi-01", "pi-08"]

    # the same command while pi-05 is still down: unreachable, and its run still the one to collect
    before = {r.run_id for r in store.all_rows()}
    p = fleet(env, *argv)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 1, err
    down = {b["host"]: b for b in json.loads(out)["boards"]}
    assert down[CUT]["outcome"] == "unreachable" and down[CUT]["run_id"] == cut_run, down[CUT]
    assert {r.run_id for r in store.all_rows()} == before and rack.board_runs(CUT) == [cut_run]

    # the board comes back; the same command resumes: pi-05's run collected, nobody measured again
    rack.restore(CUT)
    p = fleet(env, *argv)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 1, err                                 # pi-09 is still unreachable
    again = {b["host"]: b for b in json.loads(out)["boards"]}
    assert json.loads(out)["resumed"] is True and "resuming" in err
    assert again[CUT]["outcome"] == "ok" and again[CUT]["run_id"] == cut_run
    new = {r.run_id for r in store.all_rows()} - before
    assert new == {cut_run}                                       # collected, not measured again
    collected = store.load(cut_run)
    assert collected.label == CUT and collected.state == "complete"
    assert 5 <= collected.duration_s < 5 + 1
    assert rack.board_runs(CUT) == []
    assert again["pi-09"]["outcome"] == "unreachable"
    assert all(again[h]["run_id"] == boards[h]["run_id"] for h in ok)

    # the report of the fleet: one row per board, each judged for its own cycle time
    html = tmp_path / "fleet.html"
    r = subprocess.run([sys.executable, "-m", "rtforge", "fleet", "report", str(inv), "-o", str(html)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = html.read_text()
    assert "a 20 ms cycle" in text and "a 5 ms cycle" in text and "no latency run of this board" in text
    assert descendants_alive(tag) == []                           # no ansible, rtforge or ssh left behind


def test_ctrl_c_lets_go_of_every_board_and_the_same_command_collects_their_runs(tmp_path):
    import signal

    rack = Rack.start(3)
    try:
        inv = rack.inventory(tmp_path / "lab.ini", group_vars="rtforge_interval_us=1000")
        env = {**os.environ, "RTFORGE_RESULTS_DIR": str(tmp_path / "results")}
        argv = ["latency", str(inv), "--duration", "6s", "--retries", "0", "--json"]
        p = fleet(env, *argv, start_new_session=True)
        deadline = time.monotonic() + 90
        while not all((runs := rack.board_runs(n)) and rack.board_state(n, runs[0]).startswith("running")
                      for n in rack.boards):
            assert time.monotonic() < deadline and p.poll() is None, "the runs did not start"
            time.sleep(0.1)
        going = {n: rack.board_runs(n)[0] for n in rack.boards}
        os.killpg(p.pid, signal.SIGINT)                              # what a terminal's Ctrl-C does
        _, err = p.communicate(timeout=60)
        assert p.returncode == 130 and "a board's run goes on there" in err
        assert {n: rack.board_runs(n) for n in rack.boards} == {n: [r] for n, r in going.items()}
        assert Store(tmp_path / "results").all_rows() == []              # nothing measured was stored half-way...
        p = fleet(env, *argv)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        result = json.loads(out)
        assert result["resumed"] is True
        assert {b["host"]: b["run_id"] for b in result["boards"]} == going   # ...and nothing was lost or measured twice
        assert sorted(r.run_id for r in Store(tmp_path / "results").all_rows()) == sorted(going.values())
        assert all(rack.board_runs(n) == [] for n in rack.boards)
    finally:
        rack.stop()
