#!/usr/bin/env python3
"""What a fleet costs the controller: its CPU as a fixed part plus a part per
board, `rtforge fleet latency` of N seconds run at two (or more) fleet sizes
(--sizes 8,32), each size once per round (--rounds), in one run of this bench.

The controller's processes -- rtforge fleet, ansible-inventory,
ansible-playbook, its workers, the fork server and every rtforge forked from
it, their ssh clients and ssh master connections -- run in one cgroup v2 of
their own, the simulated boards' sshds and everything they start (sessions,
shells, runners, probes) in another; each group's cpu.stat usage_usec, read
before and after a command, is its CPU, whichever of its processes have
ended meanwhile.  A least-squares line over every fleet of every round,

    controller CPU = a + b * boards

gives the fixed part a (reading the inventory, starting Ansible and the fork
server, the play's end) and the part per board b, printed with the goal for
b (<= 0.25 s, issue 34).  The boards' own CPU is fitted the same way: on a
real fleet each board spends it on its own CPUs.

Secondary, as measured in the same rounds: the wall times, and their ratio
to `rtforge latency` of one board (run before each round and after the
last): on this machine the boards are simulated on the controller's own
CPUs, so that ratio measures the simulation as much as rtforge.

The boards are tests/support/fleetboards.py's: real sshds on loopback, each
in its own mount and UTS namespace (own host name, own /var/lib/rtforge),
one rack of max(--sizes) boards; a fleet of n boards is its first n.  The
probes measure one CPU at a slow interval (--cpus 0 --interval-us 10000):
this measures the orchestration, not latency.  rtforge's bytecode is
compiled first, as pip install does.

Every board costs the controller one SSH key exchange.  OpenSSH 9.2
(Debian 12, and Raspberry Pi OS bookworm's sshd) agrees on
sntrup761x25519-sha512, post-quantum, whose key generation runs on the
client: 60-165 ms of the controller's CPU per board (2026-11-28 and -27 on
this VM), against ~10-20 ms for curve25519-sha256 (or for
mlkem768x25519-sha256, a 10.0 client's first).
The bench measures both on pi-01 first and prints them; --kex ALGORITHMS
sets KexAlgorithms for the single board and the fleet alike (as a user
would, in the inventory's ansible_ssh_common_args), to see rtforge's own
share.  --memory: one more fleet at the largest size, its peak memory (the
sum of the controller's processes' proportional set sizes, sampled once a
second: the sampling takes CPU, so not in the rounds).  --base SRC: another
rtforge's src/ (an older commit's, `git archive COMMIT src | tar -x -C
DIR`), its fleets run beside this one's in every round, in alternating
order, and fitted apart: a before and an after under the same load.

    .venv/bin/python bench/fleet_scale.py [--sizes 8,32] [--seconds 10] [--rounds 3] [--kex ALGORITHMS]
                                          [--memory] [--base SRC]

Needs root (the boards' namespaces, sshd, SCHED_FIFO, the cgroups) and
cgroup v2 (at /sys/fs/cgroup, or beside cgroup v1 in a hybrid layout).
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
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support: the boards

import rtforge  # noqa: E402
from tests.support.fleetboards import Rack  # noqa: E402
from tests.support.procs import pids, proc_stat  # noqa: E402

SAMPLE_S = 1.0
CGROUP_ROOT = Path("/sys/fs/cgroup")
GOAL_PER_BOARD_S = 0.25   # issue 34: the controller's CPU per board


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


def cgroup2_mount() -> tuple[Path | None, str]:
    """Where cgroup v2 is mounted: /sys/fs/cgroup, else (a hybrid layout, cgroup v1's controllers at
    /sys/fs/cgroup/<name>) the cgroup2 mount beside them.  (None, why not) without one."""
    mounts = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            before, _, after = line.partition(" - ")
            if after.split()[:1] == ["cgroup2"]:
                mounts.append(Path(before.split()[4]))
    except OSError:
        pass
    if CGROUP_ROOT in mounts:
        return CGROUP_ROOT, "cgroup v2 at /sys/fs/cgroup"
    beside = [m for m in mounts if CGROUP_ROOT in m.parents]
    if beside:
        return beside[0], f"cgroup v2 at {beside[0]}, beside cgroup v1 (not at {CGROUP_ROOT}: a hybrid layout)"
    return None, (f"fleet_scale needs cgroup v2 and none is mounted at {CGROUP_ROOT} (this machine has "
                  f"{'cgroup v1 only' if (CGROUP_ROOT / 'cpuacct').is_dir() else 'no cgroup file system there'}): "
                  "boot with systemd.unified_cgroup_hierarchy=1, or mount one with "
                  f"`mount -t cgroup2 none {CGROUP_ROOT}/unified`")


class Group:
    """A cgroup v2 of this bench's: its processes' CPU (cpu.stat's usage_usec: the ended ones' too)."""

    def __init__(self, root: Path, name: str):
        self.dir = root / f"rtforge-bench-{os.getpid()}-{name}"
        self.dir.mkdir()

    def seconds(self) -> float:
        for line in (self.dir / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise RuntimeError(f"{self.dir}/cpu.stat has no usage_usec")

    def add(self, pids: list[int]) -> None:
        for pid in pids:
            try:
                (self.dir / "cgroup.procs").write_text(f"{pid}\n")
            except OSError:   # it ended meanwhile
                continue

    def run_in(self, argv: list[str]) -> list[str]:
        """argv, started in this group (a shell moves itself in, then execs it: everything argv starts is here)."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.dir), *argv]

    def close(self, root: Path) -> None:
        """Its processes back to the root group, then the group removed."""
        for pid in (self.dir / "cgroup.procs").read_text().split():
            try:
                (root / "cgroup.procs").write_text(f"{pid}\n")
            except OSError:
                continue
        try:
            self.dir.rmdir()
        except OSError as e:
            print(f"fleet_scale: could not remove {self.dir} ({e.strerror}): rmdir it by hand", file=sys.stderr)


def fit(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """Least squares y = a + b*x over the points: (a, b, the standard error of b; nan with fewer than 3 points)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    rss = sum((y - a - b * x) ** 2 for x, y in points)
    se = (rss / (n - 2) / sxx) ** 0.5 if n > 2 else float("nan")
    return a, b, se


@dataclass
class Measured:
    """One timed command: its wall time, the CPU of the controller's group and of the boards' group meanwhile."""

    wall: float
    cpu: float
    boards_cpu: float
    proc: subprocess.CompletedProcess
    start: Start
    mem: PeakRss | None = None


def timed(argv: list[str], env: dict, ctl: Group, boards: Group, memory_of: Rack | None = None) -> Measured:
    """argv run in the controller's group; memory_of (the rack whose boards are not counted): its peak
    memory too, whose sampling costs CPU (the bench's own, but on the same CPUs): the rounds go without it."""
    c0, b0, t0, began = ctl.seconds(), boards.seconds(), time.monotonic(), time.time()
    with CpuBusy() as load:
        p = subprocess.Popen(ctl.run_in(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if memory_of is None:
            mem = None
            out, err = p.communicate()
        else:
            with PeakRss(p.pid, memory_of) as mem:
                out, err = p.communicate()
    wall = time.monotonic() - t0
    return Measured(wall, ctl.seconds() - c0, boards.seconds() - b0,
                    subprocess.CompletedProcess(argv, p.returncode, out, err), Start(began, load), mem)


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


def sizes_of(text: str) -> list[int]:
    try:
        sizes = sorted({int(s) for s in text.split(",")})
    except ValueError:
        sizes = []
    if len(sizes) < 2 or sizes[0] < 1:
        raise SystemExit(f"fleet_scale: --sizes {text!r}: give two fleet sizes or more, e.g. 8,32")
    return sizes


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--sizes", type=sizes_of, default=[8, 32], help="fleet sizes, e.g. 8,32 (the fit needs two)")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kex", help="KexAlgorithms for every ssh of the bench (default: OpenSSH's own)")
    ap.add_argument("--memory", action="store_true", help="one more fleet of the largest size: its peak memory")
    ap.add_argument("--base", type=Path, metavar="SRC",
                    help="another rtforge's src/ (an older commit's), measured beside this one in every round")
    return ap.parse_args()


def preflight(args: argparse.Namespace) -> tuple[Path, str] | None:
    """Where cgroup v2 is and what to call it; None (said on stderr) when the bench cannot run."""
    if os.geteuid() != 0:
        print("fleet_scale needs root (the boards' namespaces and sshds, the cgroups)", file=sys.stderr)
        return None
    mount, where = cgroup2_mount()
    if mount is None:
        print(where, file=sys.stderr)
        return None
    if args.base is not None and not (args.base / "rtforge" / "__init__.py").is_file():
        print(f"fleet_scale: --base {args.base} holds no rtforge/: give an rtforge checkout's src/", file=sys.stderr)
        return None
    # an installed rtforge has its bytecode (pip compiles it): so does this checkout, whatever
    # PYTHONDONTWRITEBYTECODE says, or each of the rtforges and Ansible workers compiles its sources
    for package in [Path(rtforge.__file__).parent] + ([args.base / "rtforge"] if args.base else []):
        compileall.compile_dir(package, quiet=2)
    return mount, where


def main() -> int:
    args = arguments()
    found = preflight(args)
    if found is None:
        return 2
    mount, where = found
    biggest = max(args.sizes)
    rack = Rack.start(biggest)
    groups: list[Group] = []
    tmp = Path(tempfile.mkdtemp(prefix="rtforge-fleet-bench-"))
    try:
        boards = Group(mount, "boards")
        groups.append(boards)
        ctl = Group(mount, "controller")
        groups.append(ctl)
        boards.add(rack.processes())   # the sshds: every session, shell, runner and probe they start is there
        names = list(rack.boards)
        ssh_args = f"-o KexAlgorithms={args.kex}" if args.kex else ""
        inventories = {n: rack.inventory(tmp / f"rack-{n}.ini", groups={"rack": names[:n]}, ssh_args=ssh_args,
                                         group_vars="rtforge_cpus=0\nrtforge_interval_us=10000")
                       for n in args.sizes}
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
        results = tmp / "results"
        env = {**os.environ, "RTFORGE_RESULTS_DIR": str(results)}
        # each rtforge measured, with its environment (--base: that src/ first on the path, its own store)
        variants = {"this": env}
        if args.base is not None:
            variants = {"base": {**env, "RTFORGE_RESULTS_DIR": str(tmp / "base-results"),
                                 "PYTHONPATH": os.pathsep.join([str(args.base.resolve()),
                                                                *filter(None, [os.environ.get("PYTHONPATH")])])},
                        "this": env}
        rt = [sys.executable, "-m", "rtforge"]
        one = rt + ["latency", "pi-01", "--ssh-config", str(cfg), "--duration", f"{args.seconds}s", "--cpus", "0",
                    "--interval-us", "10000", "--json"]

        def fleet_argv(n: int) -> list[str]:
            return rt + ["fleet", "latency", str(inventories[n]), "--duration", f"{args.seconds}s", "--json", "--new"]

        def run(argv: list[str], variant: str = "this", memory: bool = False) -> Measured:
            e = variants[variant]
            m = timed(argv, e, ctl, boards, memory_of=rack if memory else None)
            assert m.proc.returncode == 0, m.proc.stderr[-2000:]
            m.start.find(Path(e["RTFORGE_RESULTS_DIR"]), m.proc.stdout)
            return m

        singles = [run(one)]
        fleets: dict[str, dict[int, list[Measured]]] = {v: {n: [] for n in args.sizes} for v in variants}
        for r in range(args.rounds):
            for n in args.sizes if r % 2 == 0 else reversed(args.sizes):   # neither size always first
                for v in list(variants) if r % 2 == 0 else reversed(variants):   # nor either rtforge
                    fleets[v][n].append(run(fleet_argv(n), v))
            singles.append(run(one))
        mem = run(fleet_argv(biggest), memory=True).mem if args.memory else None
        report(args, where, singles, fleets, mem, kex_default, kex_classic)
        return 0
    finally:
        rack.stop()
        for g in groups:   # after the boards' processes are gone: a group with none left can go
            g.close(mount)
        import shutil
        if not os.environ.get("RTFORGE_BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


def report(args, where: str, singles: list[Measured], by_variant: dict[str, dict[int, list[Measured]]],
           mem: PeakRss | None, kex_default: tuple[str, float], kex_classic: tuple[str, float]) -> None:
    cpus = os.cpu_count() or 1
    fleets = by_variant["this"]
    print(f"fleet_scale: `rtforge fleet latency` of {args.seconds} s on {', '.join(map(str, args.sizes))} boards, "
          f"{args.rounds} rounds ({time.strftime('%Y-%m-%d %H:%M %Z')}, {cpus} CPUs, {where})")
    print("  the controller's CPU (its cgroup: rtforge fleet, ansible-inventory, ansible-playbook and its workers, "
          "the fork server and the rtforges it forks, their ssh clients and masters):")
    for variant, sized in by_variant.items():
        a, b, se = fit([(n, m.cpu) for n, ms in sized.items() for m in ms])
        name = f"--base {args.base}" if variant == "base" else "this rtforge"
        if len(by_variant) > 1:
            print(f"   {name}:")
        for n, ms in sized.items():
            print(f"    {n:3d} boards: {' '.join(f'{m.cpu:.2f}' for m in ms)} s "
                  f"(median {statistics.median(m.cpu for m in ms):.2f} s)")
        verdict = "met" if b <= GOAL_PER_BOARD_S else "not met"
        print(f"    fit over {sum(map(len, sized.values()))} fleets: {a:.2f} s + {b:.3f} s per board "
              f"(± {se:.3f} s, its standard error); goal <= {GOAL_PER_BOARD_S:.2f} s per board: {verdict}")
    ba, bb, _ = fit([(n, m.boards_cpu) for n, ms in fleets.items() for m in ms])
    sc = statistics.median(s.cpu for s in singles)
    print(f"    one board, `rtforge latency HOST` alone: {sc:.2f} s (median of {len(singles)})")
    print(f"  ssh's key exchange, the client's CPU per connection to pi-01 (one per board): {kex_default[1]:.0f} ms "
          f"({kex_default[0]}{', as this bench ran' if not args.kex else ''}), {kex_classic[1]:.0f} ms "
          f"({kex_classic[0]}{', as this bench ran' if args.kex == 'curve25519-sha256' else ''})")
    print(f"  the boards' own CPU (their cgroup: sshd, sessions, runners, probes; on a real fleet each board's own, "
          f"here these {cpus} CPUs'): {ba:.2f} s + {bb:.3f} s per board; one board alone "
          f"{statistics.median(s.boards_cpu for s in singles):.2f} s")
    sw = statistics.median(s.wall for s in singles)
    print(f"  secondary, wall time (the boards are simulated on the same {cpus} CPUs): one board "
          f"{' '.join(f'{s.wall:.1f}' for s in singles)} s (median {sw:.1f} s, its start "
          f"{statistics.median(s.start.seconds for s in singles):.1f} s)")
    for n, ms in fleets.items():
        mid = sorted(ms, key=lambda m: m.wall)[len(ms) // 2]
        stolen = mid.start.load.busy(mid.start.began, mid.start.last, stolen=True)
        print(f"    {n:3d} boards: {' '.join(f'{m.wall:.1f}' for m in ms)} s, {mid.wall / sw:.2f}x one board's "
              f"in the median round; its start (to the last board's first sample) {mid.start.seconds:.1f} s, the "
              f"CPUs {mid.start.busy:.0%} busy meanwhile ({stolen:.0%} stolen by the hypervisor)")
    if mem is not None:
        n = max(fleets)
        print(f"  peak memory of {n} boards (one more fleet, sampled once a second): {mem.peak / 2**20:.0f} MiB "
              f"({mem.peak / n / 2**20:.0f} MiB per board, {mem.count_peak} processes at most; the sampling "
              f"took {mem.cpu_s:.1f} s of CPU)")


if __name__ == "__main__":
    sys.exit(main())
