"""A rack of boards on this machine: each a real OpenSSH server on its own
loopback port, in a mount and UTS namespace of its own -- its own host name
(uname -n), its own /var/tmp and /var/lib/rtforge (tmpfs), so each has its
own run folders and its own one-run-at-a-time rule, as separate boards do.
Everything else is real and shared: the kernel, the CPUs, the probe.

A board's namespace is held by a sleeping process; its sshd is started in
it with nsenter, so a board can be cut off (its sshd and every session of
it killed: connections refused, as for a board that dropped off the
network) while its run goes on, and come back later with its files as
they were.  An unreachable board is an inventory host whose port nothing
listens on.

    rack = Rack.start(8)          # pi-01 ... pi-08, reached as root with a throwaway key
    rack.inventory(path, extra_hosts={"pi-09": {"ansible_port": rack.dead_port}})
    rack.cut("pi-03"); rack.restore("pi-03")
    rack.stop()                   # every process of every board, the namespaces, the folder
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rtforge.device.transport.safesh import BOARD_DIR

from .procs import free_ports, pids, proc_stat

SSHD = "/usr/sbin/sshd"
_DIR = re.compile(r"rtforge-rack-t([0-9]+)-.*")


@dataclass
class Board:
    name: str
    port: int
    holder: subprocess.Popen
    sshd: subprocess.Popen | None = None

    @property
    def mnt_ns(self) -> str:
        return os.readlink(f"/proc/{self.holder.pid}/ns/mnt")


@dataclass
class Rack:
    dir: Path
    boards: dict[str, Board] = field(default_factory=dict)
    dead_port: int = 0

    # -- making and ending it ---------------------------------------------------------------------
    @classmethod
    def start(cls, n: int, prefix: str = "pi") -> Rack:
        sweep_stale()
        base = Path(tempfile.mkdtemp(prefix=f"rtforge-rack-t{os.getpid()}-"))
        base.chmod(0o755)
        rack = cls(base)
        try:
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host_key")], check=True)
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "id_ed25519")],
                           check=True)
            (base / "authorized_keys").write_text((base / "id_ed25519.pub").read_text())
            host_pub = (base / "host_key.pub").read_text().split()
            known = []
            *ports, rack.dead_port = free_ports(n + 1)   # the last: nothing listens there, an unreachable board
            for i, port in enumerate(ports, 1):
                name = f"{prefix}-{i:02d}"
                (base / f"sshd-{name}.conf").write_text(_sshd_config(base, port, name))
                known.append(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
                rack.boards[name] = Board(name, port, _holder(base, name))
            (base / "known_hosts").write_text("".join(known))
            for b in rack.boards.values():
                rack._wait_ready(b)
                rack.restore(b.name)
        except BaseException:
            rack.stop()
            raise
        return rack

    def processes(self) -> list[int]:
        """Every process in the boards' mount namespaces: the holders, sshds, runs, probes, loads."""
        spaces = set()
        for b in self.boards.values():
            try:
                spaces.add(b.mnt_ns)
            except OSError:
                continue
        out = []
        for pid in pids():
            try:
                if os.readlink(f"/proc/{pid}/ns/mnt") in spaces:
                    out.append(pid)
            except OSError:
                continue
        return out

    def stop(self) -> None:
        """Every process in every board's namespace (runs, probes, loads, sshd), then the holders."""
        holders = {b.holder.pid for b in self.boards.values()}
        for pid in self.processes():   # one walk of /proc for all the boards
            if pid not in holders:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue
        for b in self.boards.values():
            if b.sshd is not None and b.sshd.poll() is None:
                b.sshd.kill()
            if b.sshd is not None:
                b.sshd.wait()
            if b.holder.poll() is None:
                b.holder.kill()
            b.holder.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- a board dropping off the network and coming back ---------------------------------------
    def cut(self, name: str) -> None:
        """The board's sshd and every session of it, killed: connections are refused from now on."""
        b = self.boards[name]
        if b.sshd is None:
            return
        for pid in pids():
            st = proc_stat(pid)
            if st is not None and st.ppid == b.sshd.pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        b.sshd.kill()
        b.sshd.wait()
        b.sshd = None

    def restore(self, name: str) -> None:
        b = self.boards[name]
        if b.sshd is not None:
            return
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory (absent on a fresh root)
        log = open(self.dir / f"sshd-{name}.log", "ab")
        b.sshd = subprocess.Popen(["nsenter", "-t", str(b.holder.pid), "-m", "-u", SSHD, "-D", "-e", "-f",
                                   str(self.dir / f"sshd-{name}.conf")], stdout=subprocess.DEVNULL, stderr=log)
        log.close()
        deadline = time.monotonic() + 10
        import socket
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", b.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"sshd of {name} did not start: {(self.dir / f'sshd-{name}.log').read_text()}")

    def _wait_ready(self, b: Board) -> None:
        deadline = time.monotonic() + 10
        while not (self.dir / f"ready-{b.name}").exists():
            if time.monotonic() > deadline or b.holder.poll() is not None:
                raise RuntimeError(f"the namespace of {b.name} did not come up")
            time.sleep(0.02)

    def board_runs(self, name: str) -> list[str]:
        """The run folders under the board's own /var/lib/rtforge/runs."""
        root = Path(f"/proc/{self.boards[name].holder.pid}/root{BOARD_DIR}/runs")
        return sorted(p.name for p in root.iterdir()) if root.is_dir() else []

    def board_state(self, name: str, run_id: str) -> str:
        """The runner's state of a run on the board (running, done, ...; '' before it records one)."""
        p = Path(f"/proc/{self.boards[name].holder.pid}/root{BOARD_DIR}/runs/{run_id}/raw/runner/state")
        try:
            return p.read_text().strip()
        except OSError:
            return ""

    # -- the inventory a user would write ----------------------------------------------------------
    def host_vars(self, name: str) -> str:
        return f"{name} ansible_host=127.0.0.1 ansible_port={self.boards[name].port}"

    def inventory(self, path: Path, *, groups: dict[str, list[str]] | None = None, group_vars: str = "",
                  extra_lines: str = "", ssh_args: str = "") -> Path:
        """An INI inventory: the boards in groups (default: one group 'rack'), reached as root with the rack's key
        and known_hosts (in ansible_ssh_common_args, as a user would pin them, with ssh_args after them)."""
        groups = groups or {"rack": list(self.boards)}
        lines = []
        for g, names in groups.items():
            lines.append(f"[{g}]")
            lines += [self.host_vars(n) for n in names]
            lines.append("")
        lines += [extra_lines, "[all:vars]", "ansible_user=root",
                  f"ansible_ssh_private_key_file={self.dir / 'id_ed25519'}",
                  f"ansible_ssh_common_args='-o UserKnownHostsFile={self.dir / 'known_hosts'} "
                  f"-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes{' ' + ssh_args if ssh_args else ''}'",
                  group_vars, ""]
        path.write_text("\n".join(lines))
        return path


def _holder(base: Path, name: str) -> subprocess.Popen:
    """A sleeping process in a new mount and UTS namespace: the board's /var/tmp, rtforge folder, host name
    and home.

    The home is a fresh Debian root's (base-files' dot.bashrc and dot.profile), not this machine's:
    bash reads ~/.bashrc for every command sshd runs, and a developer's (here: pyenv's init, ~0.1 s of
    CPU and 100 processes a session) would be paid by every board on the CPUs the controller measures."""
    skel = "/usr/share/base-files"
    script = (f"mount -t tmpfs -o mode=1777,size=256m rtforge-{name} /var/tmp && "
              f"mount -t tmpfs -o mode=700,size=256m rtforge-lib-{name} {BOARD_DIR} && "
              f"mount -t tmpfs -o mode=700,size=16m rtforge-home-{name} /root && "
              f"cp {skel}/dot.bashrc /root/.bashrc && cp {skel}/dot.profile /root/.profile && hostname {name} && "
              f": > {base}/ready-{name} && exec sleep 2147483647")
    Path(BOARD_DIR).mkdir(mode=0o700, exist_ok=True)  # the mount point (on this machine: its own folder)
    return subprocess.Popen(["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def _sshd_config(base: Path, port: int, name: str) -> str:
    return f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {base / 'host_key'}
PidFile {base / f'sshd-{name}.pid'}
AuthorizedKeysFile {base / 'authorized_keys'}
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
LogLevel ERROR
MaxStartups 100:30:200
"""


def sweep_stale() -> None:
    """Folders of racks whose test session was killed (their processes died with their namespaces' holders
    only if those were killed too: a killed session's boards are found by their sshd configs)."""
    for folder in Path(tempfile.gettempdir()).glob("rtforge-rack-t*"):
        m = _DIR.fullmatch(folder.name)
        if m and proc_stat(m[1]) is None:
            for pid in pids():
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if str(folder).encode() in cmd:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            shutil.rmtree(folder, ignore_errors=True)
