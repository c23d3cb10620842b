"""`rtforge latency`, `runs` and `show` end to end, with the real engines."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.measure.session import run_latency
from rtforge.measure.spec import LatencySpec
from rtforge.results.store.runstore import Store

from ..support import procs
from ..support.remoteboard import run_sessions, session_members
from ..support.runs import left_in

REQUIRED_CPU_KEYS = {
    "cpu",
    "count",
    "min_ns",
    "avg_ns",
    "p99_ns",
    "p999_ns",
    "p9999_ns",
    "max_ns",
    "overruns",
    "overflow",
}


def cli_json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def tagged_processes(tag: str) -> list[int]:
    """Processes that inherited our test's environment tag (loads, engines, rtforge)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if f"RTFORGE_TEST_TAG={tag}".encode() in Path(f"/proc/{name}/environ").read_bytes():
                stat = Path(f"/proc/{name}/stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":
                    found.append(int(name))
        except OSError:
            pass
    return found


def start_cli(tmp_path, *argv) -> tuple[subprocess.Popen, str]:
    """rtforge in its own session, tagged so that its processes can be found."""
    tag = uuid.uuid4().hex
    env = {**os.environ, "RTFORGE_TEST_TAG": tag, "RTFORGE_RESULTS_DIR": str(tmp_path / "results")}
    return procs.start_cli(env, *argv), tag


def measuring(tmp_path: Path, seconds: int) -> None:
    """Wait until the run has measured `seconds` whole seconds (30 s for
    its folder, 30 s for the seconds): a loaded machine starts it late."""
    deadline = time.monotonic() + 30
    while not (raws := list((tmp_path / "results" / "runs").glob("*/raw"))):
        assert time.monotonic() < deadline, "no run folder within 30 s"
        time.sleep(0.1)
    procs.probe_measured(raws[0], seconds)


def wait_gone(tag: str, timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and tagged_processes(tag):
        time.sleep(0.1)
    return tagged_processes(tag)


@pytest.mark.root
@pytest.mark.slow
def test_probe_run_is_stored_and_shown(tmp_path, capsys):
    rd = str(tmp_path / "results")
    shown = cli_json(
        capsys, "latency", "--duration", "3s", "--load", "cpu", "--label", "stock kernel", "--results-dir", rd, "--json"
    )
    assert shown["engine"] == "probe" and shown["partial"] is False and shown["label"] == "stock kernel"
    assert set(shown["cpus"][0]) >= REQUIRED_CPU_KEYS
    assert shown["max_ns"] == max(c["max_ns"] for c in shown["cpus"])
    # the stored numbers are the probe's own
    run_dir = Path(rd) / "runs" / shown["run_id"]
    probe_doc = json.loads((run_dir / "raw" / "probe.json").read_text())
    assert [(c["cpu"], c["count"], c["max_ns"], c["overruns"]) for c in probe_doc["cpus"]] == [
        (c["cpu"], c["count"], c["max_ns"], c["overruns"]) for c in shown["cpus"]
    ]
    for c in shown["cpus"]:
        assert c["min_ns"] <= c["p99_ns"] <= c["p999_ns"] <= c["p9999_ns"] <= c["max_ns"]
    assert shown["config"]["loads"] == ["cpu"] and 3 <= shown["duration_s"] < 3 + 1
    assert (
        shown["reproducer"]
        == "rtforge latency --duration 3s --interval-us 200 --priority 90 --load cpu --label 'stock kernel'"
    )
    # the index agrees with the run, and `show last` finds it
    rows = cli_json(capsys, "runs", "--results-dir", rd, "--json")
    assert [(r["run_id"], r["max_ns"], r["p99_ns"], r["loads"]) for r in rows] == [
        (shown["run_id"], shown["max_ns"], shown["all"]["p99_ns"], "cpu")
    ]
    assert cli_json(capsys, "show", "last", "--results-dir", rd, "--json") == shown
    assert cli_json(capsys, "show", shown["run_id"][:12], "--results-dir", rd, "--json")["run_id"] == shown["run_id"]
    # the human table shows the same max, in µs with one decimal
    capsys.readouterr()
    assert main(["show", "last", "--results-dir", rd]) == 0
    text = capsys.readouterr().out
    assert f"{shown['max_ns'] / 1000:,.1f}" in text and "stock kernel" in text   # "1,593.6" on a loaded machine


@pytest.mark.root
@pytest.mark.slow
def test_cyclictest_engine_matches_cyclictests_own_summary(tmp_path, capsys):
    rd = str(tmp_path / "results")
    shown = cli_json(
        capsys,
        "latency",
        "--engine",
        "cyclictest",
        "--duration",
        "3s",
        "--interval-us",
        "500",
        "--histogram-us",
        "200",
        "--load",
        "zero",
        "--results-dir",
        rd,
        "--json",
    )
    assert shown["engine"] == "cyclictest" and shown["partial"] is False
    out = (Path(rd) / "runs" / shown["run_id"] / "raw" / "cyclictest.out").read_text()

    def line(name):  # e.g. "# Max Latencies: 00012 00015"
        return [int(v) for v in re.search(rf"^# {name}: (.*)$", out, re.M).group(1).split()]

    cpus = shown["cpus"]
    assert [c["max_ns"] // 1000 for c in cpus] == line("Max Latencies")
    assert [c["min_ns"] // 1000 for c in cpus] == line("Min Latencies")
    assert [c["overflow"] for c in cpus] == line("Histogram Overflows")
    assert [c["count"] - c["overflow"] for c in cpus] == line("Total")
    assert all(c["overruns"] is None for c in cpus)  # cyclictest cannot tell
    run = Store(rd).load(shown["run_id"])
    assert run.engine_argv[0] == "cyclictest" and "--histogram=200" in run.engine_argv
    assert run.telemetry and len(run.telemetry["t_s"]) >= 2  # from the probe in monitor mode
    if "# /dev/cpu_dma_latency set to 0us" in out:  # cyclictest held it: no warning that it could not be
        assert run.system["cpu_dma_latency_us"] == 0
        assert not any("cpu_dma_latency" in w for w in run.warnings)


@pytest.mark.root
@pytest.mark.slow
def test_ctrl_c_stops_loads_and_keeps_the_partial_run(tmp_path):
    p, tag = start_cli(tmp_path, "latency", "--duration", "60s", "--load", "cpu,io,zero", "--settle-s", "1")
    measuring(tmp_path, 2)
    assert len(tagged_processes(tag)) > 4  # rtforge, runner, probe, loads
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert wait_gone(tag) == []
    store = Store(tmp_path / "results")
    run = store.load(store.resolve("last"))
    assert run.state == "interrupted" and run.end_reason == "SIGINT" and run.partial
    assert run.config["loads"] == ["cpu", "io", "zero"] and run.config["settle_s"] == 1
    assert all(c.count > 0 and c.count + c.overruns > 9000 for c in run.cpus)  # 2 s or more of 5000 periods
    assert any("interrupted" in w for w in run.warnings)
    # the store holds the run's data only: the runner's programs and scratch files are gone
    assert sorted(p.name for p in store.run_dir(run.run_id).iterdir()) == ["raw", "result.json"]


@pytest.mark.root
@pytest.mark.slow
def test_sigterm_is_an_interrupt_too(tmp_path):
    p, tag = start_cli(tmp_path, "latency", "--duration", "60s", "--load", "zero", "--settle-s", "0")
    measuring(tmp_path, 1)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert wait_gone(tag) == []
    store = Store(tmp_path / "results")
    run = store.load(store.resolve("last"))
    assert run.state == "interrupted" and run.end_reason == "SIGTERM" and run.partial
    assert all(c.count > 0 for c in run.cpus)


@pytest.mark.root
@pytest.mark.slow
def test_a_killed_rtforge_leaves_the_run_going_to_its_end_and_listed(tmp_path, capsys):
    """As on a board: the runner owns the run, not rtforge.  It ends on its
    own, stops its loads, and the next `runs` finishes it in the store."""
    p, tag = start_cli(tmp_path, "latency", "--duration", "8s", "--load", "cpu,zero", "--settle-s", "1")
    measuring(tmp_path, 1)
    p.kill()  # rtforge only
    p.wait()
    rows = cli_json(capsys, "runs", "--results-dir", str(tmp_path / "results"), "--json")
    assert len(rows) == 1 and rows[0]["state"] == "running"  # its runner still measures
    assert tagged_processes(tag)
    assert wait_gone(tag, timeout=30) == []  # ends by itself, loads included
    rows = cli_json(capsys, "runs", "--results-dir", str(tmp_path / "results"), "--json")
    assert len(rows) == 1 and rows[0]["state"] == "complete" and rows[0]["partial"] is False
    shown = cli_json(capsys, "show", "last", "--results-dir", str(tmp_path / "results"), "--json")
    assert 8 <= shown["duration_s"] < 8 + 1
    # 8 s of 5000 periods/s per CPU, each sampled or counted by the probe as missed
    assert [c["count"] + c["overruns"] for c in shown["cpus"]] == [pytest.approx(40_000, rel=0.01)] * len(shown["cpus"])


@pytest.mark.root
@pytest.mark.slow
def test_sigkill_of_everything_keeps_the_last_checkpoint_and_the_series(tmp_path, capsys):
    p, tag = start_cli(tmp_path, "latency", "--duration", "60s")
    # wait for the first checkpoint with data (every 10 s; start-up may be slow on a loaded machine)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        docs = [json.loads(f.read_text()) for f in (tmp_path / "results" / "runs").glob("*/raw/probe.json")]
        if docs and all(c["count"] > 0 for c in docs[0]["cpus"]):
            break
        time.sleep(0.5)
    time.sleep(3)  # the series goes on past the checkpoint
    for pid in tagged_processes(tag):
        os.kill(pid, signal.SIGKILL)
    p.wait()
    assert wait_gone(tag) == []
    shown = cli_json(capsys, "show", "last", "--results-dir", str(tmp_path / "results"), "--json")
    assert shown["state"] == "killed" and shown["partial"] is True
    raw = tmp_path / "results" / "runs" / shown["run_id"] / "raw"
    checkpoint = json.loads((raw / "probe.json").read_text())
    series = [json.loads(line) for line in (raw / "series.jsonl").read_text().splitlines()]
    for i, c in enumerate(shown["cpus"]):
        # every wake-up the series holds, which is more than the checkpoint's
        assert c["count"] == sum(row["count"][i] for row in series) > checkpoint["cpus"][i]["count"] > 10_000
    assert any("killed" in w for w in shown["warnings"])
    assert any("known only from its per-second series" in w for w in shown["warnings"])


@pytest.mark.root
@pytest.mark.slow
def test_an_exception_mid_run_stops_everything_and_keeps_the_run(tmp_path):
    calls = []

    def progress(p):
        calls.append(1)
        if len(calls) == 8:
            raise RuntimeError("boom")

    store = Store(tmp_path / "results")
    with pytest.raises(RuntimeError, match="boom"):
        run_latency(LatencySpec(duration_s=30, loads=["cpu", "zero"], settle_s=1), store, on_progress=progress)
    run = store.load(store.resolve("last"))
    assert run.state == "failed" and run.partial and all(c.count > 0 for c in run.cpus)
    sids = run_sessions(store.run_dir(run.run_id) / "raw" / "runner")
    assert len(sids) >= 4 and session_members(sids) == []  # runner, probe, loads: all gone


BAD = [
    (["--duration", "10x"], "'10x' is not a duration"),
    (["--duration", "0s"], "shorter than one second"),
    (["--duration", "90"], "has no unit"),
    (["--duration", ""], "'' is not a duration"),
    (["--duration", "101d"], "longer than 100 days"),
    (["--duration", "２s"], "'２s' is not a duration"),  # a full-width digit
    (["--duration", "1e9"], "'1e9' is not a duration"),
    (["--loops", "99999999999"], "--loops 1e+11 is out of range: use 1 to 2 147 483 647"),
    (["--loops", "0"], "--loops 0 is out of range"),
    (["--loops", "1_000"], "--loops wants a whole number"),
    (["--interval-us", "abc"], "--interval-us wants a whole number from 10 to 10 000 000 µs, got 'abc'"),
    (["--interval-us", "5"], "--interval-us 5 is out of range"),
    (["--interval-us", "２００"], "--interval-us wants a whole number"),
    (["--priority", "100"], "--priority 100 is out of range"),
    (["--spike-us", "1e300"], "--spike-us wants a number"),
    (["--spike-us", "nan"], "--spike-us wants a number"),
    (["--spike-us", "inf"], "--spike-us wants a number"),
    (["--spike-us", "3000000000"], "--spike-us 3e+09 is out of range"),
    (["--histogram-us", "2000000"], "--histogram-us 2e+06 is out of range: use 10 to 1 000 000 µs"),
    (["--settle-s", "-1"], "--settle-s wants a number"),
    (["--cpus", "1-0"], "'1-0' is not a CPU list"),
    (["--cpus", "4000"], "CPU 4000 is not available here"),
    (["--cpus", "0-99999999999"], "is not available here: this machine's CPUs are"),
    (["--load", "cpu,disk"], "unknown load 'disk'"),
    (["--engine", "ftrace"], "unknown engine 'ftrace'"),
    (["--phase", "random"], "unknown phase 'random'"),
    (["--engine", "cyclictest", "--phase", "spread"], "cyclictest starts its threads one after another"),
    (["--duration", "5s", "--loops", "10"], "give --duration or --loops, not both"),
    (["--poll-s", "0"], "--poll-s 0 is out of range"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_sentence_exit_2_and_stores_nothing(tmp_path, capsys, argv, message):
    rd = tmp_path / "results"
    assert main(["latency", *argv, "--results-dir", str(rd)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert left_in(rd / "runs") == []


def test_a_store_that_cannot_be_a_folder_is_said_before_the_run(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    for rd, says in ((afile, f"the run store {afile} is not a folder"),
                     (afile / "results", f"the run store {afile / 'results'} cannot be a folder (below a file")):
        t0 = time.monotonic()
        assert main(["latency", "--duration", "3s", "--results-dir", str(rd)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rtforge: error: {says}") and len(err.strip().splitlines()) == 1, err
        assert time.monotonic() - t0 < 2.5                       # said before a 3 s run, not after it
    assert afile.read_text() == ""


def test_missing_cyclictest_and_stress_ng_name_their_packages(tmp_path, capsys, monkeypatch, probe):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for argv, package in (
        (["--engine", "cyclictest"], "apt install rt-tests"),
        (["--load", "cpu"], "apt install stress-ng"),
    ):
        assert main(["latency", *argv, "--results-dir", str(tmp_path / "r")]) == 2
        assert package in capsys.readouterr().err
    assert not (tmp_path / "r" / "runs").exists()


@pytest.mark.root
def test_no_rt_privileges_says_how_to_get_them(tmp_path):
    """root without CAP_SYS_NICE (and RLIMIT_RTPRIO 0) cannot use SCHED_FIFO."""
    env = {**os.environ, "RTFORGE_RESULTS_DIR": str(tmp_path / "results")}
    r = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_nice", sys.executable, "-m", "rtforge", "latency", "--duration", "2s"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "rtforge: error: cannot use SCHED_FIFO priority 90: Operation not permitted: run as root, or give your "
        "user rtprio and memlock limits (e.g. '@realtime - rtprio 99' and '@realtime - memlock unlimited' in "
        "/etc/security/limits.d/realtime.conf, then log in again)"
    )
    assert not (tmp_path / "results" / "runs").exists()


def test_show_errors(tmp_path, capsys):
    rd = str(tmp_path / "results")
    assert main(["show", "last", "--results-dir", rd]) == 2
    assert "no runs stored" in capsys.readouterr().err
    assert main(["runs", "--results-dir", rd]) == 0
    assert "no runs" in capsys.readouterr().out


@pytest.mark.root
@pytest.mark.slow
def test_live_progress_on_a_terminal(tmp_path):
    """On a terminal: elapsed/total and the max so far per CPU, redrawn."""
    # a terminal that can redraw (CI's TERM=dumb would rightly get no live line)
    env = {**os.environ, "RTFORGE_RESULTS_DIR": str(tmp_path / "results"), "COLUMNS": "160", "TERM": "xterm"}
    code, text = procs.run_on_pty([sys.executable, "-m", "rtforge", "latency", "--duration", "4s"], env)
    assert code == 0, text[-500:]
    assert "measuring" in text and re.search(r"\d+/4 s", text) and re.search(r"CPU0 max [\d,]+\.\d µs", text)
    assert "stored as" in text
