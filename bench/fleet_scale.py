#!/usr/bin/env python3
"""What a fleet costs the controller: `rtforge fleet latency` of N seconds on
32 simulated boards against `rtforge latency` of N seconds on one of them,
measured side by side in one run: one board, the fleet, one board, the
fleet, ... (--rounds fleets, each between two single-board runs).  Each
fleet is judged against the mean of the two single runs around it; the
ratio printed is the median over the rounds, with the lowest and highest
(a 2-CPU virtual machine varies by 10-15 % from one run to the next).

The boards are tests/support/fleetboards.py's: real sshds on loopback, each
in its own mount and UTS namespace (own host name, own /var/lib/rtforge),
all on this machine's CPUs -- so every board's probe competes with the
controller for them.  The probes measure one CPU at a slow interval
(--cpus 0 --interval-us 10000) so that 32 of them leave the machine to the
controller: this measures the orchestration, not latency.

rtforge's bytecode is compiled first, as pip install does.

Every board costs the controller one SSH key exchange.  OpenSSH 9.2
(Debian 12, and Raspberry Pi OS bookworm's sshd) agrees on
sntrup761x25519-sha512, post-quantum, whose key generation runs on the
client: ~150 ms of the controller's CPU per board, against ~20 ms for
curve25519-sha256 (or for mlkem768x25519-sha256, a 10.0 client's first).  The
bench measures both on pi-01 first and prints them; --kex ALGORITHMS sets
KexAlgorithms for the single board and the fleet alike (as a user would, in
the inventory's ansible_ssh_common_args), to see rtforge's own share.

Prints: wall times and their ratio (goal <= 1.5), the controller's CPU time
(rtforge fleet, ansible-playbook, its workers and modules, every rtforge
under them and their ssh clients: everything in the play's session and
this process's children), its peak memory (the sum of those processes'
proportional set sizes, PSS: shared pages split among their sharers,
sampled once a second in one more run of each, as the sampling takes CPU
from what it measures), per board; and the boards' own CPU time, which
here competes with the controller for the same CPUs (cgroup v1's cpuacct).

    .venv/bin/python bench/fleet_scale.py [--boards 32] [--seconds 10] [--rounds 3] [--kex ALGORITHMS]

Needs root (the boards' namespaces, sshd, SCHED_FIFO).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support: the boards

import rtforge  # noqa: E402
from tests.support.fleetboards import Rack  # noqa: E402
from tests.support.procs import pids, proc_stat  # noqa: E402

SAMPLE_S = 1.0


def children_cpu_s() -> float:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return c.ru_utime + c.ru_stime


class Sampler:
    """A thread that samples every `every` seconds while its with-block runs (and once more at its end)."""

    every = 1.0

    def __init__(self):
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()
        self.sample()

    def __enter__(self):
        self.sample()
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


class PeakRss(Sampler):
    """The summed resident set of the process tree under root (sampled): the controller's footprint."""

    # once a second: reading every process's smaps_rollup walks its page tables, and this sampler
    # shares the CPUs with what it measures (at 5 Hz it took ~4 s of CPU during a 32-board run)
    every = SAMPLE_S

    def __init__(self, root: int, rack: Rack):
        super().__init__()
        self.root, self.peak, self.count_peak, self.cpu_s = root, 0, 0, 0.0
        self.exclude = {b.holder.pid for b in rack.boards.values()}

    def _tree(self) -> list[int]:
        kids: dict[int, list[int]] = {}
        for pid in pids():
            st = proc_stat(pid)
            if st:
                kids.setdefault(st.ppid, []).append(pid)
        out, todo = [], [self.root]
        while todo:
            p = todo.pop()
            out.append(p)
            todo += kids.get(p, [])
        return out

    def sample(self) -> None:
        t0 = time.thread_time()
        total = 0
        tree = self._tree()
        for pid in tree:
            try:   # PSS: each shared page (a forked worker's, a library's) counted once over the sharers
                rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
                total += int(rollup.split("Pss:", 1)[1].split()[0]) * 1024
            except (OSError, IndexError, ValueError):
                continue
        self.peak = max(self.peak, total)
        self.count_peak = max(self.count_peak, len(tree))
        self.cpu_s += time.thread_time() - t0


class CpuBusy(Sampler):
    """How busy the machine's CPUs were, from /proc/stat read ten times a
    second (a read is ~0.1 ms: nothing next to what it measures): to tell a
    phase that waits from one that is short of CPU."""

    every = 0.1

    def __init__(self):
        super().__init__()
        self.samples: list[tuple[float, int, int, int]] = []   # (time.time(), busy, stolen, all: jiffies)

    @staticmethod
    def _read() -> tuple[int, int, int]:
        # user nice system idle iowait irq softirq steal [guest guest_nice: already in user and nice]
        user, nice, system, idle, iowait, irq, softirq, steal = (
            int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
        busy = user + nice + system + irq + softirq
        return busy, steal, busy + idle + iowait + steal

    def sample(self) -> None:
        self.samples.append((time.time(), *self._read()))

    def busy(self, t0: float, t1: float, stolen: bool = False) -> float:
        """The share of all CPUs' time used between t0 and t1 (the nearest
        samples); stolen: the share the hypervisor gave to other guests."""
        a = min(self.samples, key=lambda s: abs(s[0] - t0))
        b = min(self.samples, key=lambda s: abs(s[0] - t1))
        k = 2 if stolen else 1
        return (b[k] - a[k]) / (b[3] - a[3]) if b[3] > a[3] else float("nan")


def first_samples(results: Path, stdout: str) -> list[float]:
    """When each run of a command's --json output began measuring (its probe's own clock, time.time())."""
    said = json.loads(stdout)
    ids = [b["run_id"] for b in said["boards"]] if "boards" in said else [said["run_id"]]
    return [json.loads((results / "runs" / i / "raw" / "probe.json").read_text())["start_realtime_ns"] / 1e9
            for i in ids]


def timed(argv: list[str], env: dict, boards: BoardsCpu, memory_of: Rack | None = None
          ) -> tuple[float, float, PeakRss | None, subprocess.CompletedProcess, float | None, Start]:
    """Wall, CPU, and (memory_of: the rack whose boards are not counted) the
    peak memory, whose sampling costs CPU: the timed rounds go without it."""
    cpu0, t0, b0, began = children_cpu_s(), time.monotonic(), boards.seconds(), time.time()
    with CpuBusy() as load:
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if memory_of is None:
            mem = None
            out, err = p.communicate()
        else:
            with PeakRss(p.pid, memory_of) as mem:
                out, err = p.communicate()
    wall = time.monotonic() - t0
    b1 = boards.seconds()
    return (wall, children_cpu_s() - cpu0, mem, subprocess.CompletedProcess(argv, p.returncode, out, err),
            None if b0 is None else b1 - b0, Start(began, load))


class Start:
    """A timed command's start: from its launch to the last board's first sample."""

    def __init__(self, began: float, load: CpuBusy):
        self.began, self.load, self.last = began, load, began   # find() sets last

    def find(self, results: Path, stdout: str) -> Start:
        self.last = max(first_samples(results, stdout))
        return self

    @property
    def seconds(self) -> float:
        return self.last - self.began

    @property
    def busy(self) -> float:
        return self.load.busy(self.began, self.last)


class BoardsCpu:
    """The boards' own CPU time (their sshds, sessions, runners and probes):
    every process in a board's namespaces goes into one cpuacct cgroup,
    whose count keeps what exited and what left its parent.  On a real
    fleet this runs on the boards; here it shares the controller's CPUs.
    None where cgroup v1's cpuacct is not mounted."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, rack: Rack):
        self.dir = self.ROOT / f"rtforge-bench-boards-{os.getpid()}"
        try:
            self.dir.mkdir()
        except OSError:
            self.dir = None
            return
        for pid in rack.processes():
            try:
                (self.dir / "cgroup.procs").write_text(f"{pid}\n")
            except OSError:
                continue

    def seconds(self) -> float | None:
        return None if self.dir is None else int((self.dir / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        if self.dir is None:
            return
        for pid in (self.dir / "cgroup.procs").read_text().split():
            try:
                (self.ROOT / "cgroup.procs").write_text(f"{pid}\n")
            except OSError:
                continue
        try:
            self.dir.rmdir()
        except OSError as e:
            print(f"fleet_scale: could not remove {self.dir} ({e.strerror}): rmdir it by hand", file=sys.stderr)


def kex_cpu_ms(cfg: Path, kex: str | None, n: int = 10) -> tuple[str, float]:
    """The algorithm ssh agrees on with pi-01, and the ssh client's CPU per new connection (ms)."""
    opt = ["-o", f"KexAlgorithms={kex}"] if kex else []
    said = subprocess.run(["ssh", "-v", "-F", str(cfg), *opt, "pi-01", "true"], capture_output=True, text=True)
    agreed = next((ln.split("algorithm:", 1)[1].strip() for ln in said.stderr.splitlines() if "kex: algorithm:" in ln),
                  "?")
    cpu0 = children_cpu_s()
    for _ in range(n):
        subprocess.run(["ssh", "-F", str(cfg), *opt, "pi-01", "true"], check=True, capture_output=True)
    return agreed, (children_cpu_s() - cpu0) / n * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", type=int, default=32)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kex", help="KexAlgorithms for every ssh of the bench (default: OpenSSH's own)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("fleet_scale needs root (the boards' namespaces and sshds)", file=sys.stderr)
        return 2
    # an installed rtforge has its bytecode (pip compiles it): so does this checkout, whatever
    # PYTHONDONTWRITEBYTECODE says, or each of the 32 rtforges and Ansible workers compiles its sources
    compileall.compile_dir(Path(rtforge.__file__).parent, quiet=2)
    rack = Rack.start(args.boards)
    boards = None
    tmp = Path(tempfile.mkdtemp(prefix="rtforge-fleet-bench-"))
    try:
        boards = BoardsCpu(rack)
        inv = rack.inventory(tmp / "rack.ini", group_vars="rtforge_cpus=0\nrtforge_interval_us=10000",
                             ssh_args=f"-o KexAlgorithms={args.kex}" if args.kex else "")
        first = rack.boards["pi-01"]
        cfg = tmp / "one.ssh_config"
        host = (f"Host pi-01\n  HostName 127.0.0.1\n  Port {first.port}\n  User root\n"
                f"  IdentityFile {rack.dir / 'id_ed25519'}\n  UserKnownHostsFile {rack.dir / 'known_hosts'}\n"
                "  StrictHostKeyChecking yes\n")
        cfg.write_text(host)   # OpenSSH's own key exchange first, to measure it beside curve25519
        kex_default = kex_cpu_ms(cfg, None)
        kex_classic = kex_cpu_ms(cfg, "curve25519-sha256")
        if args.kex:
            cfg.write_text(host + f"  KexAlgorithms {args.kex}\n")
        env = {**os.environ, "RTFORGE_RESULTS_DIR": str(tmp / "results")}
        rt = [sys.executable, "-m", "rtforge"]
        one = rt + ["latency", "pi-01", "--ssh-config", str(cfg), "--duration", f"{args.seconds}s", "--cpus", "0",
                    "--interval-us", "10000", "--json"]
        fleet = rt + ["fleet", "latency", str(inv), "--duration", f"{args.seconds}s", "--json", "--new"]
        results = tmp / "results"

        def single() -> tuple[float, float, float | None, Start]:
            w, c, _, p, b, s = timed(one, env, boards)
            assert p.returncode == 0, p.stderr
            return w, c, b, s.find(results, p.stdout)

        singles = [single()]
        fleets = []
        for _ in range(args.rounds):
            fw, fc, _, fp, fb, fs = timed(fleet, env, boards)
            assert fp.returncode == 0, fp.stderr[-2000:]
            fleets.append((fw, fc, fb, fs.find(results, fp.stdout)))
            singles.append(single())
        # then once more each, for the memory only: its sampler is not in the timed rounds
        _, _, smem, p, _, _ = timed(one, env, boards, memory_of=rack)
        assert p.returncode == 0, p.stderr
        _, _, fmem, p, _, _ = timed(fleet, env, boards, memory_of=rack)
        assert p.returncode == 0, p.stderr[-2000:]
        ratios = [f[0] / ((singles[i][0] + singles[i + 1][0]) / 2) for i, f in enumerate(fleets)]
        mid = sorted(range(len(ratios)), key=ratios.__getitem__)[len(ratios) // 2]   # the median round
        fw, fc, fb, fs = fleets[mid]
        ss = statistics.median(s[3].seconds for s in singles)
        sw = statistics.median(s[0] for s in singles)
        sc = statistics.median(s[1] for s in singles)
        sm = smem.peak
        print(f"fleet_scale: {args.boards} boards, runs of {args.seconds} s, {args.rounds} rounds "
              f"({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs)")
        print(f"  one board   `rtforge latency HOST`:        wall {' '.join(f'{s[0]:.1f}' for s in singles)} s "
              f"(median {sw:.1f} s), controller CPU {sc:.1f} s, peak memory {sm / 2**20:.0f} MiB")
        print(f"  {args.boards} boards  `rtforge fleet latency INV`: wall {' '.join(f'{f[0]:.1f}' for f in fleets)} s; "
              f"the median round: wall {fw:.1f} s, controller CPU {fc:.1f} s ({fc / args.boards:.2f} s per board), "
              f"peak memory {fmem.peak / 2**20:.0f} MiB ({fmem.peak / args.boards / 2**20:.0f} MiB per board, "
              f"{fmem.count_peak} processes at most)")
        print(f"  ratio fleet/one board: wall {ratios[mid]:.2f}x median, {min(ratios):.2f}x to {max(ratios):.2f}x "
              f"(goal <= 1.5x)")
        print(f"  the start, from the command's launch to the last board's first sample: one board {ss:.1f} s; "
              f"{args.boards} boards {fs.seconds:.1f} s in the median round, the CPUs {fs.busy:.0%} busy meanwhile "
              f"on average ({fs.load.busy(fs.began, fs.last, stolen=True):.0%} stolen by the hypervisor; "
              f"{fs.load.busy(fs.last, fs.last + args.seconds):.0%} busy in the {args.seconds} s after it)")
        print(f"  ssh's key exchange, the client's CPU per connection to pi-01: {kex_default[1]:.0f} ms "
              f"({kex_default[0]}{', as this bench ran' if not args.kex else ''}), {kex_classic[1]:.0f} ms "
              f"({kex_classic[0]}{', as this bench ran' if args.kex == 'curve25519-sha256' else ''}); "
              f"the fleet made {args.boards} connections")
        if fb is not None:
            sb = statistics.median(s[2] for s in singles)
            print(f"  the boards' own CPU (sshd, runners, probes; on a real fleet each board's own, here these "
                  f"{os.cpu_count()} CPUs'): one board {sb:.1f} s, {args.boards} boards {fb:.1f} s in the median "
                  f"round; with the controller's {fc:.1f} s that is {(fb + fc) / (fw * os.cpu_count()):.0%} of "
                  f"the CPUs over the fleet's {fw:.1f} s")
        print(f"  (peak memory from one more run of each, sampled once a second: {fmem.cpu_s:.1f} s of CPU "
              f"during the fleet's, which the timed rounds do not have)")
        return 0
    finally:
        rack.stop()
        if boards is not None:   # after the boards' processes are gone: a cgroup with none left can go
            boards.close()
        import shutil
        if not os.environ.get("RTFORGE_BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
