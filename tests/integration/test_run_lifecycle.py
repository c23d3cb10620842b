"""A run on this machine has what a board's has -- detach, attach, stop, a
run that outlives a killed rtforge -- because both go through the same
runner; and what issue 11 found wrong at the edges of a run's life:
a killed cyclictest run stored as complete (item 6), a killed probe shown
with count 0 (item 12), the io load's scratch folder left behind (item 14).
Real probe, real cyclictest, real loads."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.measure.spec import LatencySpec
from rtforge.results.model import RunResult
from rtforge.results.raw.finalize import EARLY_S, early_worst
from rtforge.results.store.runstore import Store

from ..support.remoteboard import cli_env, run_sessions, session_members, start_cli, tagged, wait_for


def cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_dir_of(rd: Path) -> Path:
    return wait_for(lambda: next(iter((rd / "runs").glob("*/raw/runner/state")), None), timeout=30).parents[2]


def runner_state(d: Path) -> str:
    p = d / "raw" / "runner" / "state"
    return p.read_text().strip() if p.exists() else ""


@pytest.mark.root
@pytest.mark.slow
def test_detach_attach_and_stop_here(tmp_path, capsys):
    rd = str(tmp_path / "results")
    rc, out, err = cli(capsys, "latency", "--duration", "4s", "--detach", "--results-dir", rd)
    run_id = out.strip()
    assert rc == 0 and f"`rtforge attach {run_id}`" in err and f"`rtforge latency --stop {run_id}`" in err
    rc, out, err = cli(capsys, "runs", "--results-dir", rd, "--json")
    assert [r["state"] for r in json.loads(out)] == ["running"]
    # a second run would spoil the first one's numbers
    rc, out, err = cli(capsys, "latency", "--duration", "2s", "--results-dir", rd)
    assert rc == 2 and f"this machine is already measuring (run {run_id})" in err
    rc, out, err = cli(capsys, "attach", run_id[:18], "--results-dir", rd, "--json", "--poll-s", "0.3")
    shown = json.loads(out)
    assert rc == 0 and shown["run_id"] == run_id and shown["state"] == "complete"
    # 4 s at 5000 periods/s, each sampled or counted by the probe as missed
    assert [c["count"] + c["overruns"] for c in shown["cpus"]] == [pytest.approx(20_000, rel=0.01)] * len(shown["cpus"])
    # and --stop ends a detached run cleanly, keeping what it measured
    rc, out, err = cli(capsys, "latency", "--duration", "60s", "--load", "zero", "--settle-s", "0", "--detach",
                       "--results-dir", rd)
    run_id = out.strip()
    time.sleep(2)
    rc, out, err = cli(capsys, "latency", "--stop", run_id, "--results-dir", rd, "--json")
    shown = json.loads(out)
    assert rc == 0 and shown["state"] == "interrupted" and shown["partial"]
    assert Store(rd).load(run_id).end_reason == "SIGTERM"
    assert session_members(run_sessions(Path(rd) / "runs" / run_id)) == []


@pytest.mark.root
@pytest.mark.parametrize("kill", ["rtforge", "rtforge+runner"])
@pytest.mark.slow
def test_a_cyclictest_run_is_complete_only_when_it_ran_its_course(tmp_path, capsys, kill):
    """Issue 11 item 6: cyclictest ends cleanly on SIGTERM with its JSON
    written, which used to be stored as a complete run."""
    env, tag = cli_env(tmp_path)
    p = start_cli(env, "latency", "--engine", "cyclictest", "--duration", "8s", "--settle-s", "0")
    d = run_dir_of(tmp_path / "results")
    wait_for(lambda: runner_state(d) == "running", timeout=30)
    time.sleep(2)
    p.kill()
    p.wait()
    if kill == "rtforge+runner":  # e.g. the OOM killer: cyclictest lives on, nobody stops it cleanly
        os.kill(int((d / "raw" / "runner" / "runner.pid").read_text().split()[0]), signal.SIGKILL)
        time.sleep(0.5)
    rc, out, err = cli(capsys, "show", "last", "--results-dir", str(tmp_path / "results"), "--json")
    shown = json.loads(out)
    if kill == "rtforge":  # the runner goes on: the run is finished by whoever looks once it ended
        assert shown["state"] == "running"
        wait_for(lambda: not tagged(tag), timeout=30)
        rc, out, err = cli(capsys, "show", "last", "--results-dir", str(tmp_path / "results"), "--json")
        shown = json.loads(out)
        assert shown["state"] == "complete" and shown["duration_s"] == pytest.approx(8, abs=0.5)
    else:
        assert shown["state"] == "killed" and shown["partial"] is True
        assert Store(tmp_path / "results").load(shown["run_id"]).end_reason == "the runner was killed"
        assert 1 < shown["duration_s"] < 8 and all(c["count"] > 1000 for c in shown["cpus"])
        assert json.loads((d / "raw" / "cyclictest.json").read_text())  # cyclictest's own clean end, kept
    assert wait_for(lambda: not tagged(tag), timeout=30)


@pytest.mark.root
@pytest.mark.slow
def test_a_killed_probe_shows_what_its_series_holds(tmp_path, capsys):
    """Issue 11 item 12: the probe SIGKILLed before its first checkpoint."""
    env, tag = cli_env(tmp_path)
    p = start_cli(env, "latency", "--duration", "30s", "--json")
    d = run_dir_of(tmp_path / "results")
    wait_for(lambda: (d / "raw" / "series.jsonl").exists() and
             len((d / "raw" / "series.jsonl").read_text().splitlines()) >= 3, timeout=30)
    os.kill(int((d / "raw" / "runner" / "engine.pid").read_text().split()[0]), signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    shown = json.loads(out)
    assert shown["state"] == "killed" and "signal 9" in Store(tmp_path / "results").load(shown["run_id"]).end_reason
    checkpoint = json.loads((d / "raw" / "probe.json").read_text())
    assert all(c["count"] == 0 for c in checkpoint["cpus"])  # killed before its first checkpoint
    series = [json.loads(line) for line in (d / "raw" / "series.jsonl").read_text().splitlines()]
    for i, c in enumerate(shown["cpus"]):
        assert c["count"] == sum(row["count"][i] for row in series) > 0
        # a row a second, each of its 5000 periods sampled or missed (the first may be short)
        assert sum(row["count"][i] + row["overruns"][i] for row in series) > 5000 * (len(series) - 1)
        assert c["max_ns"] == max(row["max_ns"][i] for row in series if row["max_ns"][i] is not None)
        assert c["p99_ns"] >= c["p50_ns"] > 0 and c["avg_ns"] is None  # upper bounds; the average is unknown
    assert shown["duration_s"] >= len(series)
    assert any("known only from its per-second series" in w for w in shown["warnings"])


@pytest.mark.root
@pytest.mark.parametrize("kill", ["rtforge", "everything"])
@pytest.mark.slow
def test_the_io_load_leaves_no_scratch_folder_behind(tmp_path, capsys, kill):
    """Issue 11 item 14: the io load writes into the run's own folder (never
    /tmp), which the runner removes -- or, when the runner was killed too,
    whoever finishes the run."""
    env, tag = cli_env(tmp_path)
    p = start_cli(env, "latency", "--duration", "6s", "--load", "io", "--settle-s", "1")
    d = run_dir_of(tmp_path / "results")
    wait_for(lambda: runner_state(d) == "running", timeout=30)
    loads = (d / "loads").iterdir()
    assert all(f"--temp-path {d}/tmp " in f.read_text() for f in loads)
    assert any((d / "tmp").rglob("*"))  # stress-ng is writing there
    if kill == "rtforge":
        p.kill()
    else:
        # everything, including what forks while we kill (stress-ng replaces
        # a worker that dies): until nothing of the run is left
        deadline = time.monotonic() + 20
        while (left := tagged(tag)) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
    p.wait()
    if kill == "rtforge":
        assert wait_for(lambda: not tagged(tag), timeout=30)
    else:
        assert tagged(tag) == []
    rc, out, err = cli(capsys, "runs", "--results-dir", str(tmp_path / "results"), "--json")
    assert [r["state"] for r in json.loads(out)] == ["complete" if kill == "rtforge" else "killed"]
    assert not (d / "tmp").exists() and sorted(x.name for x in d.iterdir()) == ["raw", "result.json"]


def series_run(maxes: list[int], settle_s: float = 3) -> RunResult:
    return RunResult(run_id="x", engine="probe", state="complete", host="h", start_time="2026-01-01T00:00:00+00:00",
                     duration_s=float(len(maxes)), config={"loads": ["cpu"], "settle_s": settle_s},
                     series={"t_s": list(range(len(maxes))), "cpus": [0], "count": [[5000] * len(maxes)],
                             "max_ns": [maxes], "overruns": [[0] * len(maxes)]})


def test_a_worst_case_in_the_first_seconds_is_called_out():
    early = series_run([21_000_000, 40_000] + [50_000] * 28)
    text = early_worst(early)
    assert text and "21,000.0 µs" in text and "came 0 s into the run" in text and "420.0×" in text
    assert "--settle-s" in text and "3 s to start" in text
    assert early_worst(series_run([40_000] * (EARLY_S + 1) + [90_000] * 24)) is None  # the worst came later
    assert early_worst(series_run([90_000] + [40_000] * 5)) is None  # a short run is all "first seconds"


def test_the_timeline_marks_the_settle_time():
    from rtforge.report.plots import render, timeline

    svg = render(timeline(series_run([40_000] * 30, settle_s=3)), "svg").decode()
    assert "loads starting (3 s, not measured)" in svg
    assert "loads starting" not in render(timeline(series_run([40_000] * 30, settle_s=0)), "svg").decode()


@pytest.mark.root
@pytest.mark.slow
def test_the_settle_time_is_recorded_and_the_loads_ran_through_it(store):
    from rtforge.measure.session import run_latency

    t0 = time.monotonic()
    r = run_latency(LatencySpec(duration_s=2, loads=["zero"], settle_s=2), store)
    assert r.config["settle_s"] == 2 and time.monotonic() - t0 >= 4
    assert 2 <= r.duration_s < 2 + 1  # the settle time (2 s) is not measured
    started = float((store.run_dir(r.run_id) / "raw" / "runner" / "started").read_text())
    stopped = (store.run_dir(r.run_id) / "raw" / "runner" / "loads.stopped").read_text().split()
    uptime_at_load_start = int(stopped[1]) / os.sysconf("SC_CLK_TCK")
    assert started - uptime_at_load_start >= 2  # the engine started once the loads had had their time


@pytest.mark.root
def test_ctrl_c_before_measuring_keeps_the_run_and_leaves_nothing(tmp_path):
    """Interrupted while the loads settle: nothing was measured, but the run
    is kept -- interrupted, with its settings and system -- as at any other
    moment (issue 22); and the loads are stopped all the same."""
    env, tag = cli_env(tmp_path)
    p = start_cli(env, "latency", "--duration", "30s", "--load", "zero", "--settle-s", "20")
    d = run_dir_of(tmp_path / "results")
    wait_for(lambda: runner_state(d) == "settling", timeout=30)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert wait_for(lambda: not tagged(tag), timeout=30)
    [row] = Store(tmp_path / "results").all_rows()
    assert (row.run_id, row.state, row.loads) == (d.name, "interrupted", "zero")
    assert sorted(p.name for p in d.iterdir()) == ["raw", "result.json"]   # the runner's inputs are gone
