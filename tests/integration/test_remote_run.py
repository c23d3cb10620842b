"""`rtforge latency HOST`: whole runs on a board over SSH, with the real
parts -- the loopback sshd as the board, the static probe uploaded and run
by the POSIX-sh runner, stress-ng loads there, ping -f from the host."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device import SshTransport
from rtforge.errors import UserError
from rtforge.measure import loads as loads_mod
from rtforge.measure.launch import start_run
from rtforge.measure.lifecycle import runner_sha256
from rtforge.measure.loads import LoadProfile, load_profiles
from rtforge.measure.runner import BASE_DIR, runner_text
from rtforge.measure.session import collect, follow
from rtforge.measure.spec import LatencySpec
from rtforge.results.store.runstore import Store

from ..support.remoteboard import RUNS, clean_board, run_sessions, session_members, wait_for, wait_gone

pytestmark = pytest.mark.root

HOSTILE = "RT 6.12 'quoted' $(touch /tmp/rtforge-pwned) `touch /tmp/rtforge-pwned`; touch /tmp/rtforge-pwned \\ x"


def board_runs() -> set[str]:
    return set(os.listdir(RUNS)) if RUNS.exists() else set()


@pytest.mark.slow
def test_a_whole_run_with_loads_lands_in_the_store(board, sshd, tmp_path, capsys):
    rd = tmp_path / "results"
    before = board_runs()
    capsys.readouterr()
    rc = main(["latency", "board", "--ssh-config", str(sshd.ssh_config), "--duration", "3s", "--load", "cpu,zero,net",
               "--label", HOSTILE, "--results-dir", str(rd), "--json", "--poll-s", "0.5"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    shown = json.loads(out.out)
    assert shown["engine"] == "probe" and shown["state"] == "complete" and shown["partial"] is False
    assert shown["label"] == HOSTILE and not Path("/tmp/rtforge-pwned").exists()
    assert shown["host"] == platform.node()  # the board's own name, from its probe metadata
    assert shown["config"]["loads"] == ["cpu", "zero", "net"] and shown["config"]["cpus"] == sorted(
        os.sched_getaffinity(0)
    )
    assert shown["config"]["board"]["net_from_host"] is True
    assert shown["config"]["settle_s"] == 3 and shown["config"]["phase"] == "together"
    assert 3 <= shown["duration_s"] < 3 + 1
    # 3 s of 5000 periods/s per CPU, each sampled or counted by the probe as missed
    assert [c["count"] + c["overruns"] for c in shown["cpus"]] == [pytest.approx(15_000, rel=0.01)] * len(shown["cpus"])
    assert shown["reproducer"].startswith("rtforge latency board --duration 3s")
    # the stored run holds the board's files, byte for byte what the probe wrote
    run_dir = rd / "runs" / shown["run_id"]
    probe_doc = json.loads((run_dir / "raw" / "probe.json").read_text())
    assert probe_doc["state"] == "done" and probe_doc["meta"]["argv"][0].startswith(f"{BASE_DIR}/runs/")
    assert [c["count"] for c in probe_doc["cpus"]] == [c["count"] for c in shown["cpus"]]
    assert (run_dir / "raw" / "runner" / "state").read_text().strip() == "done"
    stopped = (run_dir / "raw" / "runner" / "loads.stopped").read_text().split("\n")
    assert [line.split()[2] for line in stopped if line] == ["01-cpu"] + [
        f"{i:02d}-zero" for i in range(2, 2 + os.cpu_count())
    ]
    # removed from the board only after the verified fetch; nothing left running there
    assert board_runs() == before and not (RUNS.parent / "active").exists()
    assert wait_gone(run_sessions(run_dir / "raw" / "runner")) == []
    assert Store(rd).load(shown["run_id"]).state == "complete"  # and `runs`/`show` agree


@pytest.mark.slow
def test_the_aarch64_probe_runs_on_the_board_through_qemu(board, store):
    """The cross path: the static aarch64 build, uploaded and started by the
    runner like any other, with qemu-user as its interpreter on the board."""
    if platform.machine() == "aarch64":
        pytest.skip("native aarch64: nothing to cross")
    started = start_run(
        LatencySpec(duration_s=4, interval_us=1000),
        store,
        board,
        machine="aarch64",
        probe_prefix=("qemu-aarch64-static",),
    )
    # measuring, or (on a host loaded beyond a second per ssh round trip) already done
    assert started.run.poll().state in ("running", "done")
    follow(started.run, 4, poll_s=0.3)
    result = collect(started.run, store)
    assert result.state == "complete" and result.system["machine"] == "aarch64"  # qemu-user reports the guest
    assert result.config["emulated"] is True and result.engine_argv[0].endswith("/rtprobe")
    assert all(c.count > 500 for c in result.cpus)


@pytest.mark.slow
def test_a_login_with_sudo_runs_the_board_side_as_root(sshd, store):
    before = board_runs()
    t = SshTransport("board-sudo", ssh_config=sshd.ssh_config)
    try:
        assert not t.is_root()
        started = start_run(LatencySpec(duration_s=2, loads=["cpu"], settle_s=1), store, t)
        assert started.run.sudo and Path(started.run.dir).stat().st_uid == 0
        follow(started.run, 2, poll_s=0.3)
        result = collect(started.run, store)
        assert result.state == "complete"
        assert [c.count + c.overruns for c in result.cpus] == [pytest.approx(2 * 5000, rel=0.01)] * len(result.cpus)
        assert board_runs() == before  # removed, through sudo
    finally:
        t.close()
        clean_board(before)


def test_a_login_without_sudo_is_told_what_to_do(sshd, store):
    before = board_runs()
    t = SshTransport("board-nosudo", ssh_config=sshd.ssh_config)
    try:
        with pytest.raises(UserError, match="sudo on board-nosudo needs a password"):
            start_run(LatencySpec(duration_s=2), store, t)
        assert board_runs() == before
    finally:
        t.close()


@pytest.mark.slow
def test_the_cyclictest_engine_runs_on_the_board_too(board, store):
    """cyclictest, with the probe beside it for telemetry, under the runner."""
    started = start_run(LatencySpec(duration_s=3, engine="cyclictest", loads=["zero"], settle_s=1), store, board)
    follow(started.run, 3, poll_s=0.3)
    result = collect(started.run, store)
    assert result.engine == "cyclictest" and result.state == "complete" and not result.partial
    raw = store.run_dir(result.run_id) / "raw"
    out = (raw / "cyclictest.out").read_text()
    maxes = [int(v) for v in re.search(r"^# Max Latencies: (.*)$", out, re.M).group(1).split()]
    assert [c.max_ns // 1000 for c in result.cpus] == maxes  # cyclictest's own summary
    # cyclictest skips the periods it misses and does not count them: its own total
    total = [int(v) for v in re.search(r"^# Total: (.*)$", out, re.M).group(1).split()]
    assert [c.count - c.hist.overflow for c in result.cpus] == total and all(n > 0 for n in total)
    assert result.telemetry and len(result.telemetry["t_s"]) >= 2  # the monitor probe's
    assert (raw / "runner" / "state").read_text().strip() == "done"
    assert wait_gone(run_sessions(raw / "runner")) == [] and not (RUNS / result.run_id).exists()


def write_run(d: Path, probe: Path, loads: dict[str, str]) -> None:
    """A run folder as rtforge stages one: runner, engine and load commands."""
    (d / "loads").mkdir(parents=True)
    (d / "raw" / "runner").mkdir(parents=True)
    (d / "runner.sh").write_text(runner_text())
    (d / "engine.cmd").write_text(f"probe\n{probe} --out {d}/raw --duration-s 30 --interval-us 1000\n")
    for name, cmd in loads.items():
        (d / "loads" / name).write_text(cmd + "\n")


@pytest.mark.parametrize("shell", ["dash", "busybox"])
def test_the_runner_is_posix_sh(shell, tmp_path, probe):
    """Run and stop a run with the runner under dash and busybox ash."""
    argv = {"dash": ["dash"], "busybox": ["busybox", "sh"]}[shell]
    if not shutil.which(argv[0]):
        pytest.skip(f"{argv[0]} is not installed (apt install {argv[0]})")
    base = tmp_path / "base"
    d = base / "runs" / "r1"
    write_run(d, probe, {"01-sleep": "sleep 60"})
    runner = [*argv, "-c", runner_text(), "runner"]   # as rtforge runs it: its own text, never the folder's
    r = subprocess.run([*runner, "start", str(d), "setsid", "2", runner_sha256()], capture_output=True, text=True,
                       timeout=30)
    assert r.stdout == "started running\n", r.stderr
    sids = run_sessions(d)
    assert len(sids) == 3 and session_members(sids)  # runner, engine, load: each its own session
    busy = subprocess.run([*argv, "-c", runner_text(), "runner", "busy", str(base)], capture_output=True, text=True)
    assert busy.stdout == "r1\n"
    # `start` returns once the engine is forked; the probe writes probe.json a moment later
    wait_for(lambda: (d / "raw" / "probe.json").exists(), timeout=10, step=0.05)
    status = subprocess.run([*runner, "status", str(d), "0", "probe.json"], capture_output=True, text=True)
    assert "state running\nalive 1\n" in status.stdout and '"probe_format":1' in status.stdout
    assert (
        subprocess.run([*runner, "stop", str(d)], capture_output=True, text=True).stdout
        == "signalled\n"
    )
    assert wait_gone(sids) == []
    assert (d / "raw" / "runner" / "state").read_text() == "interrupted SIGTERM\n" and not (base / "active").exists()
    assert json.loads((d / "raw" / "probe.json").read_text())["end_reason"] == "SIGTERM"
    # the engine's CPU time, from `times` before and after it
    assert len((d / "raw" / "runner" / "times").read_text().splitlines()) == 4


def test_the_runner_constants_come_from_python():
    """Final states and limits are rendered into the script, not copied."""
    from rtforge.measure.lifecycle import ENGINE_STOP_S, FINAL_STATES, RUNNER_STATES

    text = runner_text()
    assert "@CONSTANTS@" not in text and f'FINAL_STATES="{" ".join(RUNNER_STATES)}"' in text
    assert tuple(RUNNER_STATES) == FINAL_STATES
    assert f"STOP_TENTHS={round(loads_mod.STOP_GRACE_S * 10)}" in text
    assert f"ENGINE_STOP_TENTHS={round(ENGINE_STOP_S * 10)}" in text
    raw_file = Path(__file__).resolve().parents[2] / "src" / "rtforge" / "data" / "runner.sh"
    # no final state or limit spelled out in the script itself
    assert not re.search(r"^\s*(STOP_TENTHS|ENGINE_STOP_TENTHS|SETTLE_TENTHS)=\d", raw_file.read_text(), re.M)
    assert "done|interrupted|killed|failed" not in raw_file.read_text()


def with_profile(monkeypatch, **fields) -> None:
    """A load profile added to loads.toml's (loads are data)."""
    profile = LoadProfile(**{"description": "test", "package": "rtforge-test-no-such-package", **fields})
    real = load_profiles()
    monkeypatch.setattr(loads_mod, "load_profiles", lambda: {**real, profile.name: profile})


def test_a_missing_tool_is_named_before_anything_starts(board, sshd, tmp_path, capsys, monkeypatch):
    with_profile(monkeypatch, name="fake", argv=("rtforge-test-no-such-tool", "--go"))
    before = board_runs()
    spec = LatencySpec(duration_s=2, loads=["fake"])
    with pytest.raises(UserError) as e:
        start_run(spec, Store(tmp_path / "r"), board)
    assert str(e.value) == (
        "the 'fake' load needs rtforge-test-no-such-tool on board, which is not installed there: "
        "install it with `apt install rtforge-test-no-such-package` on the board, or pass --install"
    )
    # --install asks apt-get on the board (as root there), and says when it cannot
    with pytest.raises(
        UserError,
        match=r"apt-get could not install rtforge-test-no-such-package on board \(.*"
        r"Unable to locate package.*\): install it there by hand",
    ):
        start_run(spec, Store(tmp_path / "r"), board, install=True)
    assert board_runs() == before and not (tmp_path / "r" / "runs").exists()


@pytest.mark.slow
def test_a_load_that_fails_at_once_stops_the_start_and_leaves_nothing(board, tmp_path, monkeypatch):
    with_profile(monkeypatch, name="fake", argv=("sh", "-c", "echo no good >&2; exit 3"))
    before = board_runs()
    with pytest.raises(
        UserError,
        match=r"the run could not start on board \(failed load fake exited at once with "
        r"status 3\): nothing was measured",
    ):
        start_run(LatencySpec(duration_s=5, loads=["fake"], settle_s=1), Store(tmp_path / "r"), board)
    assert board_runs() == before and not (RUNS.parent / "active").exists()


BAD = [
    (["--engine", "cyclictest", "--phase", "spread"], "cyclictest starts its threads one after another"),
    (["--load", "net", "--detach"], "the net load floods the board from this machine, so it cannot run with --detach"),
    (["--cpus", "0-1000"], f"CPU {os.cpu_count()}-1000 is not available on board: its CPUs are 0-{os.cpu_count() - 1}"),
    (["--cpus", "0-99999999999"], "CPU 1024-99999999999 does not exist"),
    (["--duration", "2x"], "'2x' is not a duration"),
    (["--load", "disk"], "unknown load 'disk'"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[m for _, m in BAD])
def test_bad_remote_input_is_one_sentence_exit_2(board, sshd, tmp_path, capsys, argv, message):
    before = board_runs()
    capsys.readouterr()
    assert (
        main(["latency", "board", "--ssh-config", str(sshd.ssh_config), *argv, "--results-dir", str(tmp_path / "r")])
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert board_runs() == before and not (tmp_path / "r" / "runs").exists()


HOSTILE_ARGS = [
    (["latency", "--install"], "--install is for runs on a board: name the board first"),
    (["latency", "--ssh-config", "CFG"], "--ssh-config is for runs on a board"),
    (["attach", "x", "--ssh-config", "CFG"], "--ssh-config is for runs on a board"),
    (["latency", "board", "--stop", "../../etc", "--ssh-config", "CFG"], "no run '../../etc' on board"),
    (["attach", "board", "x; touch /tmp/rtforge-pwned", "--ssh-config", "CFG"], "no run 'x; touch"),
    (["latency", "--", "-oProxyCommand=touch /tmp/rtforge-pwned"], "is not a host to connect to"),
    (["fetch", "$(touch /tmp/rtforge-pwned)"], "is not a host to connect to"),
]


@pytest.mark.parametrize("argv, message", HOSTILE_ARGS, ids=[m for _, m in HOSTILE_ARGS])
def test_bad_hosts_and_run_ids(sshd, capsys, argv, message):
    capsys.readouterr()
    assert main([str(sshd.ssh_config) if a == "CFG" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not Path("/tmp/rtforge-pwned").exists()


def test_unreachable_board_is_one_sentence(sshd, tmp_path, capsys):
    cfg = tmp_path / "cfg"
    cfg.write_text(sshd.ssh_config.read_text().replace(f"Port {sshd.port}", "Port 1"))
    capsys.readouterr()
    assert (
        main(["latency", "board", "--ssh-config", str(cfg), "--duration", "2s", "--results-dir", str(tmp_path / "r")])
        == 2
    )
    err = capsys.readouterr().err
    assert "cannot reach board over SSH" in err and len(err.strip().splitlines()) == 1
