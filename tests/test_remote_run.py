"""`rtforge latency HOST`: whole runs on a board over SSH, with the real
parts -- the loopback sshd as the board, the static probe uploaded and run
by the POSIX-sh runner, stress-ng loads there, ping -f from the host."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.errors import UserError
from rtforge.measure import remote as remote_mod
from rtforge.measure.boardrun import runner_text
from rtforge.measure.loads import LoadProfile, load_profiles
from rtforge.measure.remote import collect, follow, start_remote_run
from rtforge.measure.spec import LatencySpec
from rtforge.results.store import Store
from rtforge.target import SshTransport

from .remoteboard import RUNS, clean_board, run_sessions, session_members, wait_gone

pytestmark = pytest.mark.root

HOSTILE = "RT 6.12 'quoted' $(touch /tmp/rtforge-pwned) `touch /tmp/rtforge-pwned`; touch /tmp/rtforge-pwned\nx"


def board_runs() -> set[str]:
    return set(os.listdir(RUNS)) if RUNS.exists() else set()


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
    assert shown["config"]["loads"] == ["cpu", "zero", "net"] and shown["config"]["cpus"] == sorted(os.sched_getaffinity(0))
    assert shown["config"]["board"]["net_from_host"] is True
    assert shown["duration_s"] == pytest.approx(3, abs=0.2)
    assert all(c["count"] > 10_000 for c in shown["cpus"])  # 3 s of 5000 wake-ups/s per CPU
    assert shown["reproducer"].startswith("rtforge latency board --duration 3s")
    # the stored run holds the board's files, byte for byte what the probe wrote
    run_dir = rd / "runs" / shown["run_id"]
    probe_doc = json.loads((run_dir / "raw" / "probe.json").read_text())
    assert probe_doc["state"] == "done" and probe_doc["meta"]["argv"][0].startswith("/var/tmp/rtforge/runs/")
    assert [c["count"] for c in probe_doc["cpus"]] == [c["count"] for c in shown["cpus"]]
    assert (run_dir / "raw" / "runner" / "state").read_text().strip() == "done"
    stopped = (run_dir / "raw" / "runner" / "loads.stopped").read_text().split("\n")
    assert [line.split()[2] for line in stopped if line] == ["01-cpu"] + [f"{i:02d}-zero" for i in range(2, 2 + os.cpu_count())]
    # removed from the board only after the verified fetch; nothing left running there
    assert board_runs() == before and not (RUNS.parent / "active").exists()
    assert wait_gone(run_sessions(run_dir / "raw" / "runner")) == []
    assert Store(rd).load(shown["run_id"]).state == "complete"  # and `runs`/`show` agree


def test_the_aarch64_probe_runs_on_the_board_through_qemu(board, store):
    """The cross path: the static aarch64 build, uploaded and started by the
    runner like any other, with qemu-user as its interpreter on the board."""
    if platform.machine() == "aarch64":
        pytest.skip("native aarch64: nothing to cross")
    started = start_remote_run(LatencySpec(duration_s=2, interval_us=1000), board, store, machine="aarch64",
                               probe_prefix=("qemu-aarch64-static",))
    assert started.run.poll().alive
    follow(started.run, 2, poll_s=0.3)
    result = collect(started.run, store)
    assert result.state == "complete" and result.system["machine"] == "aarch64"  # qemu-user reports the guest
    assert result.config["emulated"] is True and result.engine_argv[0].endswith("/rtprobe")
    assert all(c.count > 500 for c in result.cpus)


def test_a_login_with_sudo_runs_the_board_side_as_root(sshd, store):
    before = board_runs()
    t = SshTransport("board-sudo", ssh_config=sshd.ssh_config)
    try:
        assert not t.is_root()
        started = start_remote_run(LatencySpec(duration_s=2, loads=["cpu"]), t, store)
        assert started.run.sudo and Path(started.run.dir).stat().st_uid == 0
        follow(started.run, 2, poll_s=0.3)
        result = collect(started.run, store)
        assert result.state == "complete" and all(c.count > 5000 for c in result.cpus)
        assert board_runs() == before  # removed, through sudo
    finally:
        t.close()
        clean_board(before)


def test_a_login_without_sudo_is_told_what_to_do(sshd, store):
    before = board_runs()
    t = SshTransport("board-nosudo", ssh_config=sshd.ssh_config)
    try:
        with pytest.raises(UserError, match="sudo on board-nosudo needs a password"):
            start_remote_run(LatencySpec(duration_s=2), t, store)
        assert board_runs() == before
    finally:
        t.close()


@pytest.mark.parametrize("shell", ["dash", "busybox"])
def test_the_runner_is_posix_sh(shell, tmp_path, probe):
    """Run and stop a run with the runner under dash and busybox ash."""
    argv = {"dash": ["dash"], "busybox": ["busybox", "sh"]}[shell]
    if not shutil.which(argv[0]):
        pytest.skip(f"{argv[0]} is not installed (apt install {argv[0]})")
    base = tmp_path / "base"
    d = base / "runs" / "r1"
    (d / "loads").mkdir(parents=True)
    (d / "runner.sh").write_text(runner_text())
    (d / "probe.cmd").write_text(f"{probe} --out {d}/raw --duration-s 30 --interval-us 1000\n")
    (d / "loads" / "01-sleep").write_text("sleep 60\n")
    r = subprocess.run([*argv, str(d / "runner.sh"), "start", str(d), "setsid"], capture_output=True, text=True,
                       timeout=30)
    assert r.stdout == "started running\n", r.stderr
    sids = run_sessions(d)
    assert len(sids) == 2 and session_members(sids)
    busy = subprocess.run([*argv, "-c", runner_text(), "runner", "busy", str(base)], capture_output=True, text=True)
    assert busy.stdout == "r1\n"
    status = subprocess.run([*argv, str(d / "runner.sh"), "status", str(d), "0", "1"], capture_output=True, text=True)
    assert "state running\nalive 1\n" in status.stdout and '"probe_format":1' in status.stdout
    assert subprocess.run([*argv, str(d / "runner.sh"), "stop", str(d)], capture_output=True,
                          text=True).stdout == "signalled\n"
    assert wait_gone(sids) == []
    assert (d / "state").read_text() == "interrupted SIGTERM\n" and not (base / "active").exists()
    assert json.loads((d / "raw" / "probe.json").read_text())["end_reason"] == "SIGTERM"


def with_profile(monkeypatch, **fields) -> None:
    """A load profile added to loads.toml's (loads are data)."""
    profile = LoadProfile(**{"description": "test", "package": "rtforge-test-no-such-package", **fields})
    monkeypatch.setattr(remote_mod, "load_profiles", lambda: {**load_profiles(), profile.name: profile})


def test_a_missing_tool_is_named_before_anything_starts(board, sshd, tmp_path, capsys, monkeypatch):
    with_profile(monkeypatch, name="fake", argv=("rtforge-test-no-such-tool", "--go"))
    before = board_runs()
    spec = LatencySpec(duration_s=2, loads=["fake"])
    with pytest.raises(UserError) as e:
        start_remote_run(spec, board, Store(tmp_path / "r"))
    assert str(e.value) == ("the 'fake' load needs rtforge-test-no-such-tool on board, which is not installed there: "
                            "install it with `apt install rtforge-test-no-such-package` on the board, or pass --install")
    # --install asks apt-get on the board (as root there), and says when it cannot
    with pytest.raises(UserError, match=r"apt-get could not install rtforge-test-no-such-package on board \(.*"
                                        r"Unable to locate package.*\): install it there by hand"):
        start_remote_run(spec, board, Store(tmp_path / "r"), install=True)
    assert board_runs() == before and not (tmp_path / "r" / "runs").exists()


def test_a_load_that_fails_at_once_stops_the_start_and_leaves_nothing(board, tmp_path, monkeypatch):
    with_profile(monkeypatch, name="fake", argv=("sh", "-c", "echo no good >&2; exit 3"))
    before = board_runs()
    with pytest.raises(UserError, match=r"the run could not start on board \(failed load fake exited at once with "
                                        r"status 3\): nothing was measured"):
        start_remote_run(LatencySpec(duration_s=5, loads=["fake"]), board, Store(tmp_path / "r"))
    assert board_runs() == before and not (RUNS.parent / "active").exists()


BAD = [
    (["--engine", "cyclictest"], "remote runs use the probe engine"),
    (["--load", "net", "--detach"], "the net load floods the board from this machine, so it cannot run with --detach"),
    (["--cpus", "0-4000"], f"CPU {os.cpu_count()}-4000 is not available on board: its CPUs are 0-{os.cpu_count() - 1}"),
    (["--duration", "2x"], "'2x' is not a duration"),
    (["--load", "disk"], "unknown load 'disk'"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[m for _, m in BAD])
def test_bad_remote_input_is_one_sentence_exit_2(board, sshd, tmp_path, capsys, argv, message):
    before = board_runs()
    capsys.readouterr()
    assert main(["latency", "board", "--ssh-config", str(sshd.ssh_config), *argv,
                 "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert board_runs() == before and not (tmp_path / "r" / "runs").exists()


HOSTILE_ARGS = [
    (["latency", "--detach"], "--detach is for runs on a board: name the board first"),
    (["latency", "--stop", "x"], "--stop is for runs on a board"),
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
    assert main(["latency", "board", "--ssh-config", str(cfg), "--duration", "2s",
                 "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "cannot reach board over SSH" in err and len(err.strip().splitlines()) == 1
