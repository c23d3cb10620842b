"""Loads are data; the runner starts each as a process group and leaves
nothing behind, on every path -- here as on a board (the same runner)."""

from __future__ import annotations

import os
import time

import pytest

from rtforge import procfs
from rtforge.errors import UserError
from rtforge.measure import loads as loads_mod
from rtforge.measure.launch import start_run
from rtforge.measure.loads import HostFlood, LoadProfile, load_commands, load_profiles, parse_loads
from rtforge.measure.session import stop_run
from rtforge.measure.spec import LatencySpec

from ..support.remoteboard import wait_gone
from ..support.runs import left_in

ALL = list(load_profiles())


def test_profiles_are_data_with_packages():
    assert ALL == ["cpu", "vm", "io", "net", "hackbench", "zero"]
    for p in load_profiles().values():
        assert p.description and p.package and p.argv


def test_commands_are_rendered_from_the_profiles():
    cmds = dict(load_commands(["cpu", "zero", "hackbench"], ncpus=2, deadline_s=70, tmpdir="/x/tmp"))
    assert cmds["01-cpu"] == "stress-ng --cpu 2 --timeout 70 --quiet"
    assert cmds["02-zero"] == cmds["03-zero"] == "timeout 70 cat /dev/zero"  # one per CPU
    assert cmds["04-hackbench"].startswith("timeout 70 sh -c ")  # restarted in rounds until the deadline


def groups(store, run_id: str) -> dict[str, int]:
    """load file name -> process group, from the runner's pid file."""
    r = store.run_dir(run_id) / "raw" / "runner"
    f = r / "loads.pids" if (r / "loads.pids").exists() else r / "loads.stopped"
    return {line.split()[2]: int(line.split()[0]) for line in f.read_text().splitlines() if line.strip()}


@pytest.mark.root
@pytest.mark.parametrize("name", ALL)
@pytest.mark.slow
def test_each_load_runs_and_its_whole_group_is_stopped(name, store):
    started = start_run(LatencySpec(duration_s=30, loads=[name], settle_s=1), store)
    run_dir = store.run_dir(started.run.run_id)
    try:
        pgids = groups(store, started.run.run_id)
        members = {n: procfs.group_members(g) for n, g in pgids.items()}
        log = run_dir / "raw" / "loads.log"
        assert all(members.values()), f"{name} is not running: {log.read_text() if log.exists() else ''}"
        if name in ("cpu", "io", "vm"):  # stress-ng forks its stressors into the group
            assert all(len(m) >= 2 for m in members.values()), members
        if name == "io":
            assert any((run_dir / "tmp").iterdir())  # writes in the run's own scratch folder
    finally:
        stop_run(started.run)
    time.sleep(0.1)
    assert [procfs.group_members(g) for g in pgids.values()] == [[] for _ in pgids]
    assert not (run_dir / "tmp").exists()


@pytest.mark.root
def test_hackbench_is_restarted_until_the_run_ends(store):
    started = start_run(LatencySpec(duration_s=30, loads=["hackbench"], settle_s=0), store)
    try:
        [pgid] = groups(store, started.run.run_id).values()
        seen = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < 3:  # hackbench rounds come and go in the group
            seen |= set(procfs.group_members(pgid))
            time.sleep(0.2)
        assert procfs.group_members(pgid), "the restarting loop ended"
        assert len(seen) >= 3
    finally:
        stop_run(started.run)
    assert wait_gone({pgid}) == []


def test_unknown_load_names_the_known_ones():
    with pytest.raises(UserError, match="unknown load 'cpux': choose from cpu, vm, io, net, hackbench, zero"):
        parse_loads("cpu,cpux")
    assert parse_loads(" cpu, io ,cpu,none") == ["cpu", "io"]


def test_missing_tool_names_the_debian_package(monkeypatch, tmp_path, store):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: nothing is installed
    with pytest.raises(UserError, match=r"needs stress-ng, which is not installed: apt install stress-ng"):
        start_run(LatencySpec(duration_s=2, loads=["cpu"]), store)
    with pytest.raises(UserError, match=r"needs hackbench, which is not installed: apt install rt-tests"):
        start_run(LatencySpec(duration_s=2, loads=["hackbench"]), store)
    with pytest.raises(UserError, match=r"needs ping on this machine, which is not installed: "
                                        r"apt install iputils-ping"):
        HostFlood("127.0.0.1", 10).check()
    assert not store.root.exists()


@pytest.mark.root
def test_a_load_that_fails_at_once_is_reported_and_nothing_is_stored(monkeypatch, store):
    """stress-ng refusing its arguments: the error names the load and its status."""
    bad = LoadProfile(name="cpu", description="x", package="stress-ng",
                      argv=("stress-ng", "--cpu", "1", "--no-such-option"))
    monkeypatch.setattr(loads_mod, "load_profiles", lambda: {"cpu": bad})
    with pytest.raises(UserError, match=r"\(failed load cpu exited at once with status \d+\): nothing was measured"):
        start_run(LatencySpec(duration_s=5, loads=["cpu"], settle_s=1), store)
    assert left_in(store.runs_dir) == []


@pytest.mark.root
@pytest.mark.slow
def test_a_load_writing_to_stdout_does_not_fill_the_log(store):
    """`cat /dev/zero` writes gigabytes to stdout: only stderr is logged."""
    started = start_run(LatencySpec(duration_s=30, loads=["zero"], settle_s=1), store)
    time.sleep(1.0)
    stop_run(started.run)
    assert (store.run_dir(started.run.run_id) / "raw" / "loads.log").stat().st_size < 4096


@pytest.mark.root
def test_the_host_flood_is_a_group_that_dies_with_its_stop():
    flood = HostFlood("127.0.0.1", 30)
    flood.check()
    flood.start()
    pgid = flood.popen.pid
    try:
        time.sleep(0.5)
        assert procfs.group_members(pgid)
    finally:
        flood.stop()
    assert procfs.group_members(pgid) == [] and os.path.exists(f"/proc/{os.getpid()}")
