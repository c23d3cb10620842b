"""A real OpenSSH server on a loopback port, with throwaway keys.

The tests' "board" is this machine reached through it: the real ssh client,
the real server, real key authentication and host-key checking.  Users:
root, and (created once, when missing) `rtforge-ci` with passwordless sudo
and `rtforge-nosudo` without it.
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .procs import free_port, pids, proc_stat

SSHD = "/usr/sbin/sshd"
USERS = {"rtforge-ci": "ALL=(ALL) NOPASSWD: ALL", "rtforge-nosudo": None}


def ensure_users() -> None:
    for user, sudoers in USERS.items():
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", user], check=True)
        # "*": no password, but not locked ("!"), which sshd would refuse
        subprocess.run(["usermod", "-p", "*", user], check=True)
        rule = Path(f"/etc/sudoers.d/{user}")
        if sudoers and not rule.exists():
            rule.write_text(f"{user} {sudoers}\n")
            rule.chmod(0o440)


@dataclass
class Sshd:
    dir: Path
    port: int
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


def make_sshd(base: Path) -> Sshd:
    base.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    ensure_users()
    port = free_port()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "id_ed25519")], check=True)
    pub = (base / "id_ed25519.pub").read_text()
    keys = base / "authorized_keys"
    keys.write_text(pub)
    keys.chmod(0o644)
    base.chmod(0o755)
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
""")
    host_pub = (base / "host_key.pub").read_text().split()
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    lines = []
    for alias, user in (("board", "root"), ("board-sudo", "rtforge-ci"), ("board-nosudo", "rtforge-nosudo")):
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
    sshd = Sshd(base, port)
    sshd.start()
    return sshd
