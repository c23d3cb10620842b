"""Helpers the tests share for processes and ports, written once.

    proc_stat(pid)       /proc/PID/stat parsed (None once the process is gone)
    free_port()          a free TCP port on loopback
    start_cli(env, ...)  rtforge as a separate process in its own session
    run_on_pty(argv, env)  a program on a real terminal: (exit code, what it showed)
    holds(lock, pid)     wait until a lock file names pid (a monitor holds its folder)
    probe_measured(out)  wait until a probe has measured whole seconds
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str          # R, S, D, Z, ...
    ppid: int
    pgrp: int
    session: int
    start_ticks: str    # field 22, starttime: tells a pid's owner from a later reuse


def proc_stat(pid: int | str) -> ProcStat | None:
    """/proc/PID/stat (proc(5)).  comm is in parentheses and may itself hold
    spaces and ')', so the fields are counted from the last ')'."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return ProcStat(int(pid), stat[stat.index("(") + 1:stat.rindex(")")], fields[0], int(fields[1]), int(fields[2]),
                    int(fields[3]), fields[19])


def pids() -> list[int]:
    """Every process id now."""
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """n distinct loopback ports free now: the sockets are held together while the kernel picks, since one
    closed before the next is picked may be handed out again (two boards of a rack once shared a port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def holds(lock: Path, pid: int, timeout: float = 30) -> None:
    """Wait until `lock` names `pid`: the probe writes its pid there once it
    holds the folder's flock, so a second one is refused from then on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if lock.read_text().strip() == str(pid):
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{lock} did not name pid {pid} within {timeout} s")


def probe_measured(out: Path, seconds: int = 1, checkpoint: bool = False) -> None:
    """Wait (30 s at most) until the probe has measured `seconds` whole
    seconds (a series row each) and, with `checkpoint`, written a
    checkpoint that holds samples: a loaded machine starts it late."""
    def done() -> bool:
        try:
            rows = len((out / "series.jsonl").read_text().splitlines())
            if rows < seconds:
                return False
            return not checkpoint or json.loads((out / "probe.json").read_text())["cpus"][0]["count"] > 0
        except (OSError, ValueError, KeyError, IndexError):
            return False
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, f"the probe did not measure {seconds} s within 30 s"
        time.sleep(0.05)


def start_cli(env: dict, *argv) -> subprocess.Popen:
    """`python -m rtforge ARGV` in its own session (a terminal's Ctrl-C is the test's to send)."""
    return subprocess.Popen([sys.executable, "-m", "rtforge", *argv], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_on_pty(argv: list[str], env: dict[str, str], columns: int | None = None, rows: int = 50) -> tuple[int, str]:
    """Run argv on a new pseudo-terminal (its stdout and stderr), to the end;
    with columns, a terminal that many columns wide and rows high (as `stty cols`
    and `stty rows` set it)."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:
        if columns:  # the child's end of the terminal, sized before the program can ask
            fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        os.execvpe(argv[0], argv, env)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:         # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
