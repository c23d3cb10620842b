"""SshTransport against a real sshd on loopback."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from rtforge.device import CommandFailed, ConnectionLost, LocalTransport, SshTransport
from rtforge.device.transport.transport import UploadDamaged
from rtforge.errors import UserError

from ..support.flakylink import FlakyLink
from ..support.remoteboard import wait_for


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()

pytestmark = pytest.mark.root


def test_runs_commands_and_moves_files(link, tmp_path):
    r = link.run(["uname", "-r"])
    assert r.returncode == 0 and r.stdout.strip() == os.uname().release
    assert link.is_root() and link.which("sh") and link.which("no-such-program") is None
    target = str(tmp_path / "dir with space" / "file")
    link.run(["mkdir", "-p", str(tmp_path / "dir with space")], check=True)
    link.write_bytes(target, b"\x00binary\xff\n", mode="600")
    assert Path(target).read_bytes() == b"\x00binary\xff\n" and oct(Path(target).stat().st_mode & 0o777) == "0o600"
    assert link.read_bytes(target) == b"\x00binary\xff\n"
    src = tmp_path / "tree"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "c.txt").write_text("c")
    (src / "top").write_text("t")
    link.put_tree(src, str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "a" / "b" / "c.txt").read_text() == "c"
    assert link.sha256([target]) == LocalTransport().sha256([target])


def test_put_verified_checks_every_file_on_the_target(link, tmp_path):
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.bin").write_bytes(bytes(range(256)) * 64)
    (src / "odd\\name\nwith newline").write_bytes(b"odd")  # sha256sum escapes such names
    (src / "top").write_text("top")
    link.put_verified(src, str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "odd\\name\nwith newline").read_bytes() == b"odd"
    link.put_verified(src / "top", str(tmp_path / "one"))
    assert (tmp_path / "one").read_text() == "top"
    # held to given sums (a manifest), the local copy is not the judge
    with pytest.raises(UploadDamaged, match=r"copy2/sub/a\.bin differs from what was sent; check the target's"):
        link.put_verified(src, str(tmp_path / "copy2"), expected={"sub/a.bin": "0" * 64, "top": sha("top")})
    with pytest.raises(UploadDamaged, match=r"copy3/gone is missing from what was sent \(2 files are damaged"):
        link.put_verified(src, str(tmp_path / "copy3"), expected={"gone": "0" * 64, "top": "1" * 64})


def test_put_verified_catches_bytes_damaged_in_transit(sshd, tmp_path):
    src = tmp_path / "tree"
    src.mkdir()
    (src / "probe").write_bytes(b"\x7fELF" + b"payload " * 100)
    (src / "runner.sh").write_text("#!/bin/sh\n")
    link = FlakyLink("board", ssh_config=sshd.ssh_config, needle=b"payload")
    try:
        with pytest.raises(UploadDamaged, match=r"the upload to board is damaged: \S+/dest/probe differs"):
            link.put_verified(src, str(tmp_path / "dest"))
        with pytest.raises(UploadDamaged, match=r"the upload to board is damaged: \S+/single differs"):
            link.put_verified(src / "probe", str(tmp_path / "single"))
        assert link.damaged == 2
        link.put_verified(src / "runner.sh", str(tmp_path / "fine"))  # undamaged bytes pass
    finally:
        link.close()


@pytest.mark.slow
def test_control_master_makes_commands_cheap(link):
    link.run(["true"])
    assert link.master_pid() is not None
    t0 = time.monotonic()
    for _ in range(10):
        link.run(["true"])
    per_command = (time.monotonic() - t0) / 10
    assert per_command < 0.5, per_command  # no new key exchange per command


def test_hostile_paths_and_arguments_are_not_interpreted(link, tmp_path):
    canary = tmp_path / "pwned"
    for evil in (f"x; touch {canary}", f"$(touch {canary})", f"`touch {canary}`", f"x' && touch '{canary}",
                 f"x\ntouch {canary}"):
        r = link.run(["echo", evil])
        assert r.stdout == evil + "\n"
        link.run(["cat", str(tmp_path / evil)])
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


def test_failed_command_names_the_step(link):
    with pytest.raises(CommandFailed, match=r"installing modules failed on board: .*No such file"):
        link.run(["ls", "/no/such/dir"], check=True, step="installing modules")


def test_connection_loss_names_the_step(sshd):
    t = SshTransport("board", ssh_config=sshd.ssh_config)
    t.run(["true"])
    sshd.stop()
    try:
        master = t.master_pid() or 0
        subprocess.run(["kill", str(master)], capture_output=True)
        # gone, not just signalled: else the next run reuses it
        wait_for(lambda: not master or not os.path.exists(f"/proc/{master}"), timeout=10, step=0.02)
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


def test_a_board_never_reached_is_said_so_not_a_lost_connection(tmp_path):
    """A closed port (a board that is down) on the first command: 'cannot reach', which a fleet counts
    as unreachable; it said 'lost the connection', a refusal of the board's own making."""
    from ..support.procs import free_port

    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host down\n  HostName 127.0.0.1\n  Port {free_port()}\n  StrictHostKeyChecking no\n")
    t = SshTransport("down", ssh_config=cfg)
    try:
        with pytest.raises(ConnectionLost, match=r"^cannot reach down: ssh: connect to host 127\.0\.0\.1 port "
                                                 r"\d+: Connection refused \(during listing\)$"):
            t.run(["true"], step="listing")
    finally:
        t.close()
