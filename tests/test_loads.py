"""Loads start as process groups and leave nothing behind, on every path."""

from __future__ import annotations

import os
import time

import pytest

from rtforge import procfs
from rtforge.errors import UserError
from rtforge.measure.loads import LoadSet, load_profiles, parse_loads
from rtforge.target import LocalTransport

ALL = list(load_profiles())


def test_profiles_are_data_with_packages():
    assert ALL == ["cpu", "vm", "io", "net", "hackbench", "zero"]
    for p in load_profiles().values():
        assert p.description and p.package and p.argv


@pytest.mark.root
@pytest.mark.parametrize("name", ALL)
def test_each_load_runs_and_its_whole_group_is_stopped(name, tmp_path):
    loads = LoadSet([name], LocalTransport(), ncpus=2, deadline_s=60)
    loads.check()
    loads.start(tmp_path / "loads.log")
    try:
        pgids = [p.pgid for p in loads.procs]
        members = {g: procfs.group_members(g) for g in pgids}
        assert all(members.values()), f"{name} is not running: {(tmp_path / 'loads.log').read_text()}"
        if name in ("cpu", "io", "vm"):  # stress-ng forks its stressors into the group
            assert all(len(m) >= 2 for m in members.values()), members
        tmpdirs = list(loads.tmpdirs)
        if name == "io":
            assert tmpdirs and os.path.isdir(tmpdirs[0])
    finally:
        loads.stop()
    time.sleep(0.1)
    assert [procfs.group_members(g) for g in pgids] == [[] for _ in pgids]
    assert not any(os.path.exists(d) for d in tmpdirs)


@pytest.mark.root
def test_hackbench_is_restarted_until_the_run_ends(tmp_path):
    loads = LoadSet(["hackbench"], LocalTransport(), ncpus=2, deadline_s=60)
    loads.start()
    try:
        first = loads.procs[0].pgid
        loads.procs[0].popen.wait(60)  # one round of hackbench ends on its own
        loads.poll(elapsed_s=1)
        assert loads.procs[0].pgid != first and loads.procs[0].popen.poll() is None
    finally:
        loads.stop()


def test_unknown_load_names_the_known_ones():
    with pytest.raises(UserError, match="unknown load 'cpux': choose from cpu, vm, io, net, hackbench, zero"):
        parse_loads("cpu,cpux")
    assert parse_loads(" cpu, io ,cpu,none") == ["cpu", "io"]


def test_missing_tool_names_the_debian_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: nothing is installed
    with pytest.raises(UserError, match=r"needs stress-ng, which is not installed: apt install stress-ng"):
        LoadSet(["cpu"], LocalTransport(), ncpus=1, deadline_s=10).check()
    with pytest.raises(UserError, match=r"needs hackbench, which is not installed: apt install rt-tests"):
        LoadSet(["hackbench"], LocalTransport(), ncpus=1, deadline_s=10).check()


def test_a_load_that_fails_at_once_is_reported(tmp_path, monkeypatch):
    """stress-ng refusing its arguments: the error names the load and its message."""
    from rtforge.measure import loads as loads_mod

    bad = loads_mod.LoadProfile(name="cpu", description="x", package="stress-ng",
                                argv=("stress-ng", "--cpu", "1", "--no-such-option"))
    monkeypatch.setattr(loads_mod, "load_profiles", lambda: {"cpu": bad})
    ls = LoadSet(["cpu"], LocalTransport(), ncpus=1, deadline_s=10)
    with pytest.raises(UserError, match=r"the 'cpu' load exited at once with status \d+"):
        ls.start(tmp_path / "loads.log")
    assert ls.procs == []


@pytest.mark.root
def test_a_load_writing_to_stdout_does_not_fill_the_log(tmp_path):
    """`cat /dev/zero` writes gigabytes to stdout: only stderr is logged."""
    log = tmp_path / "loads.log"
    loads = LoadSet(["zero"], LocalTransport(), ncpus=1, deadline_s=60)
    loads.start(log)
    try:
        time.sleep(1.0)
    finally:
        loads.stop()
    assert log.stat().st_size < 4096
