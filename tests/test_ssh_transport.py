"""SshTransport against a real sshd on loopback."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from rtforge.errors import UserError
from rtforge.target import CommandFailed, ConnectionLost, LocalTransport, SshTransport

pytestmark = pytest.mark.root


@pytest.fixture
def board(sshd):
    t = SshTransport("board", ssh_config=sshd.ssh_config)
    yield t
    t.close()


def test_runs_commands_and_moves_files(board, tmp_path):
    r = board.run(["uname", "-r"])
    assert r.returncode == 0 and r.stdout.strip() == os.uname().release
    assert board.is_root() and board.which("sh") and board.which("no-such-program") is None
    target = str(tmp_path / "dir with space" / "file")
    board.run(["mkdir", "-p", str(tmp_path / "dir with space")], check=True)
    board.write_bytes(target, b"\x00binary\xff\n", mode="600")
    assert Path(target).read_bytes() == b"\x00binary\xff\n" and oct(Path(target).stat().st_mode & 0o777) == "0o600"
    assert board.read_bytes(target) == b"\x00binary\xff\n"
    src = tmp_path / "tree"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "c.txt").write_text("c")
    (src / "top").write_text("t")
    board.put_tree(src, str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "a" / "b" / "c.txt").read_text() == "c"
    assert board.sha256([target]) == LocalTransport().sha256([target])


def test_control_master_makes_commands_cheap(board):
    board.run(["true"])
    assert board.master_pid() is not None
    t0 = time.monotonic()
    for _ in range(10):
        board.run(["true"])
    per_command = (time.monotonic() - t0) / 10
    assert per_command < 0.5, per_command  # no new key exchange per command


def test_hostile_paths_and_arguments_are_not_interpreted(board, tmp_path):
    canary = tmp_path / "pwned"
    for evil in (f"x; touch {canary}", f"$(touch {canary})", f"`touch {canary}`", f"x' && touch '{canary}",
                 f"x\ntouch {canary}"):
        r = board.run(["echo", evil])
        assert r.stdout == evil + "\n"
        board.run(["cat", str(tmp_path / evil)])
    assert not canary.exists()


@pytest.mark.parametrize("dest", ["-oProxyCommand=touch /tmp/rtforge-pwned", "host;id", "a b", "$(id)", "", "user@"])
def test_hostile_destinations_are_refused(dest):
    with pytest.raises(UserError, match="is not a host to connect to"):
        SshTransport(dest)
    assert not Path("/tmp/rtforge-pwned").exists()


def test_unknown_host_key_is_an_error_not_a_question(sshd, tmp_path):
    cfg = tmp_path / "cfg"
    cfg.write_text(sshd.ssh_config.read_text().replace(str(sshd.dir / "known_hosts"), str(tmp_path / "empty_known")))
    t = SshTransport("board", ssh_config=cfg)
    with pytest.raises(UserError, match="host key of board is unknown or has changed"):
        t.run(["true"])
    t.close()


def test_sudo_for_non_root_users(sshd, tmp_path):
    ok = SshTransport("board-sudo", ssh_config=sshd.ssh_config)
    assert not ok.is_root()
    assert ok.run(["id", "-u"], sudo=True, check=True).stdout.strip() == "0"
    ok.close()
    no = SshTransport("board-nosudo", ssh_config=sshd.ssh_config)
    with pytest.raises(UserError, match="sudo on board-nosudo needs a password: allow this user passwordless sudo"):
        no.run(["id", "-u"], sudo=True)
    no.close()


def test_failed_command_names_the_step(board):
    with pytest.raises(CommandFailed, match=r"installing modules failed on board: .*No such file"):
        board.run(["ls", "/no/such/dir"], check=True, step="installing modules")


def test_connection_loss_names_the_step(sshd):
    t = SshTransport("board", ssh_config=sshd.ssh_config)
    t.run(["true"])
    sshd.stop()
    try:
        subprocess.run(["kill", str(t.master_pid() or 0)], capture_output=True)
        time.sleep(0.2)
        with pytest.raises(ConnectionLost, match=r"lost the connection to board: .*\(during upload\)"):
            t.run(["true"], step="upload")
    finally:
        sshd.start()
        t.close()


def test_connection_cut_mid_command(sshd):
    t = SshTransport("board", ssh_config=sshd.ssh_config)
    t.run(["true"])
    proc_box = {}

    def cut():
        time.sleep(1.0)
        sshd.cut_connections()
        proc_box["done"] = True

    import threading

    th = threading.Thread(target=cut)
    th.start()
    with pytest.raises(ConnectionLost, match=r"\(during waiting\)"):
        t.run(["sleep", "20"], step="waiting")
    th.join()
    t.close()
