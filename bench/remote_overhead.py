#!/usr/bin/env python3
"""What measuring a board over SSH costs: the same probe run here (`rtforge
latency`) and through the SSH transport on loopback (`rtforge latency
HOST`: upload, detached runner, progress polls, verified fetch), alternating
for N rounds each so drift in the machine's state hits both alike.

Prints medians over rounds of p99 and max latency (all CPUs as one
population) for both and their ratios remote/local; the host-side CPU time
per minute of run while it follows the run (rtforge itself, its ssh
clients and the ControlMaster; locally rtforge itself, the probe excluded),
and once per run for start and fetch; and what the progress polls
cost the board: CPU time of everything the board's sshd ran for them, per
poll and as a share of one CPU at the default poll interval.

    .venv/bin/python bench/remote_overhead.py [--rounds 3] [--seconds 12] [--poll-s 5] [--login board-sudo]

Needs root (SCHED_FIFO, and the loopback sshd makes its test users).
Goal: latency ratios within 0.9-1.1; polling < 0.5 % of one board CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.sshd: the loopback "board"

from rtforge.device import SshTransport  # noqa: E402
from rtforge.measure import session  # noqa: E402
from rtforge.measure.launch import start_run  # noqa: E402
from rtforge.measure.session import run_latency  # noqa: E402
from rtforge.measure.spec import LatencySpec  # noqa: E402
from rtforge.results.stats import summarize_all  # noqa: E402
from rtforge.results.store.runstore import Store  # noqa: E402
from tests.support.sshd import make_sshd  # noqa: E402

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU time of this process and of its waited-for children (ssh clients)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def proc_cpu_s(pid: int, children: bool = True) -> float:
    """utime+stime (+ reaped children's) of pid, 0 when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    f = stat[stat.rindex(")") + 2:].split()
    ticks = int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if children else 0)
    return ticks * TICK_S


def tree_cpu_s(root: int) -> float:
    """CPU time of root's live descendants, each with its reaped children:
    all that the board's sshd spent (the detached runner is not in it)."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(name))
    total, todo = 0.0, list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        total += proc_cpu_s(pid)
        todo += kids.get(pid, [])
    return total


def latency(result) -> tuple[float, float]:
    s = summarize_all(result)
    return s.p99_ns / 1000, s.max_ns / 1000


def run_local(a, store: Store) -> dict:
    spec = LatencySpec(duration_s=a.seconds, interval_us=a.interval_us)
    c0 = own_cpu_s()
    result = run_latency(spec, store)
    # rtforge and the commands it ran (the runner's status polls); the runner
    # and the probe are not its children (detached), so they are not counted
    host = own_cpu_s() - c0
    p99, mx = latency(result)
    return {"p99_us": p99, "max_us": mx, "host_cpu_s_per_min": host * 60 / a.seconds}


def run_remote(a, sshd, store: Store) -> dict:
    spec = LatencySpec(duration_s=a.seconds, interval_us=a.interval_us)
    t = SshTransport(a.login, ssh_config=sshd.ssh_config)
    c0 = own_cpu_s()
    started = start_run(spec, store, t)
    master = t.master_pid()
    m0 = proc_cpu_s(master) if master else 0.0
    c1, board0, w0, polls = own_cpu_s(), tree_cpu_s(sshd.proc.pid), time.monotonic(), 0
    real_poll = started.run.poll

    def counted(progress=True):
        nonlocal polls
        polls += 1
        return real_poll(progress)

    started.run.poll = counted
    session.follow(started.run, spec.expected_s, poll_s=a.poll_s)
    board_poll_s, wall = tree_cpu_s(sshd.proc.pid) - board0, time.monotonic() - w0
    m1 = proc_cpu_s(master) if master else 0.0
    c2 = own_cpu_s()
    result = session.collect(started.run, store)
    t.close()
    p99, mx = latency(result)
    return {"p99_us": p99, "max_us": mx,
            "host_cpu_s_per_min": (c2 - c1 + m1 - m0) * 60 / wall,   # following: polls, ssh clients, master
            "host_once_cpu_s": own_cpu_s() - c2 + c1 - c0,            # start (upload, checks) and fetch
            "board_ms_per_poll": board_poll_s * 1000 / max(polls, 1),
            "board_poll_pct": 100 * board_poll_s / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--interval-us", type=int, default=200)
    ap.add_argument("--poll-s", type=float, default=session.BOARD_POLL_S)
    # rtforge-ci's login shell is /bin/sh, like a lean board's.  Root here
    # has a .bashrc that runs pyenv, which bash sources for every SSH
    # command: ~120 ms of CPU per command that no board would pay.
    ap.add_argument("--login", default="board-sudo", help="ssh config alias of the board's login")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: SCHED_FIFO, and the loopback sshd creates its test users")
    base = Path(tempfile.mkdtemp(prefix="rtforge-bench-sshd-"))
    sshd = make_sshd(base)
    rows: dict[str, list[dict]] = {"local": [], "remote": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(Path(tmp) / "results")
            for r in range(a.rounds):
                rows["local"].append(run_local(a, store))
                rows["remote"].append(run_remote(a, sshd, store))
                print(f"round {r + 1}/{a.rounds}: local {rows['local'][-1]}  remote {rows['remote'][-1]}",
                      file=sys.stderr)
    finally:
        sshd.stop()

    def med(kind: str, key: str) -> float:
        return statistics.median(row[key] for row in rows[kind])

    print(f"{a.rounds} rounds of {a.seconds} s each, interval {a.interval_us} µs, no load, poll every {a.poll_s} s,"
          f" login {a.login}; medians")
    print(f"{'':24}{'local':>10}{'ssh':>10}{'ssh/local':>11}")
    for key, name in (("p99_us", "p99 µs"), ("max_us", "max µs"), ("host_cpu_s_per_min", "host CPU s / min")):
        lo, re_ = med("local", key), med("remote", key)
        print(f"{name:24}{lo:10.2f}{re_:10.2f}{re_ / lo if lo else float('nan'):11.2f}")
    once = med("remote", "host_once_cpu_s")
    print(f"host CPU once per run (start: checks, upload; end: verified fetch): {once:.2f} s")
    print(
        f"board CPU per poll: {med('remote', 'board_ms_per_poll'):.1f} ms; polling costs the board "
        f"{med('remote', 'board_poll_pct'):.2f} % of one CPU (goal < 0.5 %)"
    )


if __name__ == "__main__":
    main()
