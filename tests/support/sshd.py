"""A real OpenSSH server on a loopback port, with throwaway keys.

The tests' "board" is this machine reached through it: the real ssh client,
the real server, real key authentication and host-key checking.  Users:
root, and two this test session creates and removes again, one with
passwordless sudo and one without it (SessionUsers).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .procs import free_port, pids, proc_stat

SSHD = "/usr/sbin/sshd"
SUDOERS = Path("/etc/sudoers.d")
# Each session's users carry its pid, "rtforge-t4242-sudo", so two sessions
# at once (two checkouts on one machine) never share or remove each other's;
# the comment field names the owner, so what a killed session left is known.
ROLES = {"sudo": "ALL=(ALL) NOPASSWD: ALL", "nosudo": None}
_NAME = re.compile(r"rtforge-t([0-9]+)-(?:sudo|nosudo)")
_OWNER = re.compile(r"rtforge test session ([0-9]+) started ([0-9]+)")
_DIR = re.compile(r"rtforge-sshd-t([0-9]+)-.*")


def session_dir() -> Path:
    """The sshd's folder for this session (keys, config, log), named by its pid like its users.
    Not under pytest's 0700 tmp dir: sshd reads authorized_keys as the logging-in user."""
    return Path(tempfile.mkdtemp(prefix=f"rtforge-sshd-t{os.getpid()}-"))


@dataclass
class SessionUsers:
    names: dict[str, str]                              # role -> login
    created: list[str] = field(default_factory=list)   # what this session added, to be removed


def _owner_alive(gecos: str) -> bool:
    m = _OWNER.fullmatch(gecos)
    st = proc_stat(m[1]) if m else None
    return st is not None and st.start_ticks == m[2]


def create_users() -> SessionUsers:
    """This session's users, after removing those of sessions that ended
    without removing theirs (killed midway): only rtforge-t<pid>-* users
    whose owner process is gone."""
    remove_stale_users()
    me = proc_stat(os.getpid())
    users = SessionUsers({role: f"rtforge-t{os.getpid()}-{role}" for role in ROLES})
    try:
        for role, sudoers in ROLES.items():
            user = users.names[role]
            try:
                pwd.getpwnam(user)
            except KeyError:
                subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--comment",
                                f"rtforge test session {me.pid} started {me.start_ticks}", user], check=True)
                users.created.append(user)
            # "*": no password, but not locked ("!"), which sshd would refuse
            subprocess.run(["usermod", "-p", "*", user], check=True)
            rule = SUDOERS / user
            if sudoers and user in users.created:
                rule.write_text(f"{user} {sudoers}\n")
                rule.chmod(0o440)
    except BaseException:
        remove_users(users.created)
        raise
    return users


def remove_users(names: list[str]) -> None:
    """Remove test users with their home, their sudo rule and any process of theirs."""
    for user in names:
        (SUDOERS / user).unlink(missing_ok=True)
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
        _kill_processes_of(uid)
        # userdel -r warns that a user who got no mail has no mail spool
        r = subprocess.run(["userdel", "-r", user], capture_output=True, text=True)
        if r.returncode not in (0, 12):   # 12: the home could not be removed, the user is gone
            raise RuntimeError(f"userdel -r {user} failed: {r.stderr.strip()}")


def remove_stale_users() -> None:
    """What sessions killed midway left: their users, sudo rules and sshd folders."""
    for entry in pwd.getpwall():
        if _NAME.fullmatch(entry.pw_name) and not _owner_alive(entry.pw_gecos):
            remove_users([entry.pw_name])
    for rule in SUDOERS.glob("rtforge-t*"):          # a session killed between the two removals
        if _NAME.fullmatch(rule.name):
            try:
                pwd.getpwnam(rule.name)
            except KeyError:
                rule.unlink(missing_ok=True)
    for folder in Path(tempfile.gettempdir()).glob("rtforge-sshd-t*"):
        m = _DIR.fullmatch(folder.name)
        if m and proc_stat(m[1]) is None:
            shutil.rmtree(folder, ignore_errors=True)


def _kill_processes_of(uid: int) -> None:
    """Processes a test left running as a test user (userdel refuses while there are any)."""
    mine = []
    for pid in pids():
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                os.kill(pid, signal.SIGKILL)
                mine.append(pid)
        except OSError:
            continue          # gone already
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any((st := proc_stat(p)) is not None and st.state != "Z" for p in mine):
        time.sleep(0.05)


@dataclass
class Sshd:
    dir: Path
    port: int
    users: dict[str, str]           # role -> login: board-sudo logs in as users["sudo"]
    proc: subprocess.Popen | None = None

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    def start(self) -> None:
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
                                     stdout=subprocess.DEVNULL, stderr=open(self.dir / "sshd.log", "ab"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"sshd did not start: {(self.dir / 'sshd.log').read_text()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def cut_connections(self) -> None:
        """Kill every session process of this server (the listener stays):
        what a dropped network looks like to the client."""
        for pid in pids():
            st = proc_stat(pid)
            if pid == self.proc.pid or st is None or st.ppid != self.proc.pid:
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].startswith(b"sshd"):
                os.kill(pid, 9)


def make_sshd(base: Path, users: dict[str, str]) -> Sshd:
    base.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    port = free_port()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "id_ed25519")], check=True)
    pub = (base / "id_ed25519.pub").read_text()
    keys = base / "authorized_keys"
    keys.write_text(pub)
    keys.chmod(0o644)
    base.chmod(0o755)
    # KexAlgorithms: the key exchange is not what these tests test, and OpenSSH 9.2's post-quantum default
    # costs the client ~150 ms of CPU per connection (curve25519 ~20 ms) over the hundreds the tests make;
    # the fleet's boards (fleetboards.py) and the QEMU guests keep OpenSSH's default
    (base / "sshd_config").write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {base / 'host_key'}
PidFile {base / 'sshd.pid'}
AuthorizedKeysFile {keys}
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
LogLevel ERROR
KexAlgorithms curve25519-sha256
""")
    host_pub = (base / "host_key.pub").read_text().split()
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    lines = []
    for alias, user in (("board", "root"), ("board-sudo", users["sudo"]), ("board-nosudo", users["nosudo"])):
        lines.append(f"""\
Host {alias}
  HostName 127.0.0.1
  Port {port}
  User {user}
  IdentityFile {base / 'id_ed25519'}
  IdentitiesOnly yes
  UserKnownHostsFile {base / 'known_hosts'}
  StrictHostKeyChecking yes
""")
    (base / "ssh_config").write_text("\n".join(lines))
    sshd = Sshd(base, port, users)
    sshd.start()
    return sshd
