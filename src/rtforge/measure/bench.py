"""`rtforge bench cpu`: what PREEMPT_RT costs in throughput.

The N-queens solver (package folder nqueens/, C) counts the solutions of an
N x N board with 1 and with all CPUs, R times each; stress-ng's cpu stressor
adds a second, standard figure (bogo ops/s) that other people's results can
be set against.  Both run on the target through a Transport: binaries built
for its `uname -m` (static for boards, like the probe) are uploaded to a
private temporary directory there and removed afterwards.

Order matters:
  1. every argument is checked before anything connects or starts;
  2. the target is inspected (architecture, CPUs, stress-ng) before the
     first solve, so a missing tool fails in seconds, not after minutes;
  3. thread counts alternate (1, 4, 1, 4, ...) so that slow drift -- heat,
     throttling, someone else's load -- spreads over all of them instead of
     spoiling the last one;
  4. the run is stored only when complete: an interrupted benchmark is not
     a measurement of anything, so nothing of it is kept.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from ..errors import UserError
from ..results.bench import parse_stress_ng_metrics, spread
from ..results.model import RunResult
from ..results.stats import THROTTLE_BITS, SINCE_BOOT_SHIFT
from ..results.store import Store
from ..results.system import describe
from ..target import ConnectionLost, LocalTransport, Transport
from .probebuild import build_probe, build_program
from .session import held_signals
from .spec import parse_cpu_list

DEFAULT_N = 12
N_RANGE = (4, 16)           # below 4 there is nothing to solve; 17 takes hours even on a PC
MAX_THREADS = 1024          # the solver's own limit
STRESS_METHOD = "matrixprod"  # fixed: stress-ng's default ("all") cycles through methods of different cost
SHORT_SOLVE_S = 1.0         # below this, ticks and scheduling noise weigh on a single solve
GROWTH_PER_N = 6            # each step of N costs ~5-7x more (measured for N = 10..16)
BUSY_FLOOR = 0.85           # CPU time / wall time per solver thread below this: CPUs were taken away

# OEIS A000170: ways to place N non-attacking queens on an N x N board.
# A solver that disagrees is broken, or runs on a board that miscalculates.
KNOWN_SOLUTIONS = {4: 2, 5: 10, 6: 4, 7: 40, 8: 92, 9: 352, 10: 724, 11: 2680, 12: 14200, 13: 73712,
                   14: 365596, 15: 2279184, 16: 14772512}

# Record the pid before exec'ing argv, so an interrupted step can be killed
# over a fresh connection even when the one that started it is gone.  No
# pid file (the directory already removed by the cleanup): do not start.
_WITH_PIDFILE = 'echo $$ > "$1" || exit 1; shift; exec "$@"'
# Kill that pid -- but only if it is still ours (its command line names our
# private directory): the step may have ended and its pid been reused.
_KILL_OURS = """p=$(cat "$1" 2>/dev/null) || exit 0
case "$(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null)" in *"$2"*) kill -TERM "$p" 2>/dev/null;; *) exit 0;; esac
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do kill -0 "$p" 2>/dev/null || exit 0; sleep 0.1; done
kill -KILL "$p" 2>/dev/null; exit 0"""


@dataclass
class BenchProgress:
    step: int           # solves and stress-ng runs finished so far
    total: int
    what: str           # the step now running, e.g. "N=12 · 4 threads · repetition 3/5"


def parse_threads(text: str) -> list[int | str]:
    """'1,4' -> [1, 4]; 'all' stands for every usable CPU of the target."""
    out: list[int | str] = []
    for part in text.split(","):
        p = part.strip().lower()
        if p == "all":
            value: int | str = "all"
        elif re.fullmatch(r"\d+", p) and 1 <= int(p) <= MAX_THREADS:
            value = int(p)
        else:
            raise UserError(f"'{text}' is not a list of thread counts: use numbers from 1 to {MAX_THREADS} "
                            "or 'all', comma-separated, e.g. 1,4 or 1,all")
        if value not in out:
            out.append(value)
    return out


@dataclass
class BenchSpec:
    n: int = DEFAULT_N
    threads: list[int | str] = field(default_factory=lambda: [1, "all"])
    repeat: int = 5
    warmup: int = 1                 # discarded rounds first: caches, page faults, the governor's ramp-up
    stress_s: int = 10              # per thread count; 0 = no stress-ng figure
    stress_optional: bool = False   # stress-ng missing: skip its figure with a warning instead of refusing
    label: str | None = None
    host: str | None = None         # for the reproducer only

    def validate(self) -> None:
        lo, hi = N_RANGE
        if not lo <= self.n <= hi:
            raise UserError(f"--n {self.n} is out of range: the board size must be {lo} to {hi} "
                            f"(default {DEFAULT_N}; each step up takes ~{GROWTH_PER_N}× longer)")
        if not self.threads:
            raise UserError("--threads is empty: give thread counts like 1,4 or 1,all")
        if not 1 <= self.repeat <= 1000:
            raise UserError(f"--repeat {self.repeat} is out of range: repeat each solve 1 to 1000 times (default 5)")
        if not 0 <= self.warmup <= 100:
            raise UserError(f"--warmup {self.warmup} is out of range: use 0 to 100 discarded rounds (default 1)")
        if not 0 <= self.stress_s <= 86400:
            raise UserError(f"--stress-s {self.stress_s} is out of range: give 1 to 86400 seconds, or 0 to skip stress-ng")

    def resolve_threads(self, usable_cpus: int) -> list[int]:
        out: list[int] = []
        for t in self.threads:
            value = usable_cpus if t == "all" else int(t)
            if value not in out:
                out.append(value)
        return out

    def reproducer(self) -> str:
        argv = ["rtforge", "bench", "cpu", *([self.host] if self.host else []),
                "--threads", ",".join(map(str, self.threads)), "--n", str(self.n), "--repeat", str(self.repeat),
                "--stress-s", str(self.stress_s)]
        if self.warmup != 1:
            argv += ["--warmup", str(self.warmup)]
        if self.label:
            argv += ["--label", self.label]
        return shlex.join(argv)


class Workdir:
    """A private temporary directory on the target, removed on every exit;
    a step still running when we leave early (Ctrl-C, an error) is killed
    first.  Cleanup holds off further Ctrl-Cs so a second one cannot leave
    a solver or a directory behind."""

    def __init__(self, transport: Transport):
        self.t = transport
        self.path: str | None = None
        self.warnings: list[str] = []

    def __enter__(self) -> Workdir:
        r = self.t.run(["sh", "-c", 'mktemp -d "${TMPDIR:-/tmp}/rtforge-bench.XXXXXX"'], check=True,
                       step="creating a temporary directory")
        self.path = r.stdout.strip()
        return self

    @property
    def pidfile(self) -> str:
        return f"{self.path}/pid"

    def upload(self, local, name: str) -> str:
        remote = f"{self.path}/{name}"
        self.t.put(local, remote, step=f"uploading {name}")
        sha = self.t.sha256([remote], step=f"checking {name}")
        if sha.get(remote) != LocalTransport().sha256([str(local)])[str(local)]:
            raise UserError(f"{name} arrived damaged on {self.t.name} (checksum differs): check the target's disk space")
        return remote

    def run(self, argv: list[str], step: str):
        # input=b"": ssh must not read (and swallow) the terminal.
        return self.t.run(["sh", "-c", _WITH_PIDFILE, "sh", self.pidfile, *argv], input=b"", step=step)

    def __exit__(self, exc_type, exc, tb):
        if self.path is None:
            return
        with held_signals():
            try:
                if exc_type is not None:
                    self.t.run(["sh", "-c", _KILL_OURS, "sh", self.pidfile, self.path], timeout=30)
                if self.t.run(["rm", "-rf", "--", self.path], timeout=60).returncode:
                    raise OSError("rm -rf failed")
            except (ConnectionLost, OSError, subprocess.TimeoutExpired) as e:
                # The measurement is done (or already failing; then the solver's
                # watchdog ends it once the link is gone): say so, lose nothing.
                self.warnings.append(f"could not remove {self.path} on {self.t.name} ({e}): remove it by hand")


def _first_contact(transport: Transport) -> str:
    """`uname -m` of the target; an unreachable host is the user's to fix."""
    try:
        return transport.run(["uname", "-m"], check=True).stdout.strip()
    except ConnectionLost as e:
        detail = str(e).split(": ", 1)[-1]
        raise UserError(f"cannot reach {transport.name} over SSH ({detail}): check the host name, "
                        "or name it in your ssh config (--ssh-config FILE)") from None


def _stress_version(spec: BenchSpec, transport: Transport, warnings: list[str]) -> str | None:
    """stress-ng's version when its figure is wanted and it is there."""
    if spec.stress_s == 0:
        return None
    if not transport.which("stress-ng"):
        what = (f"stress-ng is not installed on {transport.name}, so there is no bogo-ops figure: "
                "install it there (apt install stress-ng)")
        if not spec.stress_optional:
            raise UserError(f"{what}, or pass --stress-optional to go without it (--stress-s 0 always does)")
        warnings.append(f"{what} to compare with other tools' results")
        return None
    r = transport.run(["stress-ng", "--version"], input=b"")
    m = re.search(r"version\s+(\S+)", r.stdout + r.stderr)
    return m.group(1) if m else "unknown"


def _meta(work: Workdir, probe: str) -> dict:
    r = work.run([probe, "--meta"], step="reading the system's metadata")
    if r.returncode:
        raise RuntimeError(f"rtprobe --meta failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def _usable_cpus(work: Workdir, system: dict) -> int:
    """CPUs a process may run on (nproc follows affinity, so isolcpus are
    not counted); the online CPUs when nproc is missing."""
    r = work.run(["nproc"], step="counting CPUs")
    if r.returncode == 0 and r.stdout.strip().isdigit():
        return int(r.stdout.strip())
    online = system.get("online_cpus")
    return len(parse_cpu_list(online)) if online else 1


def _throttled_during(before: str | None, after: str | None) -> list[str]:
    """Pi firmware throttling that happened during the benchmark: flags set
    now, or "since boot" flags that were not set before it."""
    try:
        b, a = int(before, 16), int(after, 16)
    except (TypeError, ValueError):
        return []
    seen = (a & 0xF) | ((a & ~b) >> SINCE_BOOT_SHIFT & 0xF)
    return [name for bit, name in THROTTLE_BITS.items() if seen >> bit & 1]


def _warnings(spec: BenchSpec, system: dict, threads: list[int], usable: int, nqueens: list[dict],
              after: dict) -> list[str]:
    warn = []
    governors = [g for g in system.get("governors") or [] if g != "performance"]
    if governors:
        warn.append(f"CPU frequency governor {', '.join(governors)} changes the clock during the benchmark: "
                    "set 'performance' (cpupower frequency-set -g performance) on every kernel you compare")
    over = [t for t in threads if t > usable]
    if over:
        warn.append(f"{', '.join(map(str, over))} threads on {usable} usable CPUs measures oversubscription, "
                    f"not throughput: use --threads 1,all")
    flags = _throttled_during(system.get("throttled_hex"), after.get("throttled_hex"))
    if flags:
        warn.append(f"the board was throttled during the benchmark ({', '.join(flags)}), so its times are too slow: "
                    "cool it and use a proper power supply, then measure again")
    for e in nqueens:
        # A lone solver thread should hold its CPU the whole time; less means
        # something else ran there (other programs, a hypervisor's steal).
        busy = sorted(c / t for c, t in zip(e["cpu_ns"], e["elapsed_ns"]) if t)
        expected = min(e["threads"], usable)
        if busy and busy[len(busy) // 2] < BUSY_FLOOR * expected:
            warn.append(f"with {e['threads']} thread{'s' if e['threads'] > 1 else ''} the solver kept only "
                        f"{busy[len(busy) // 2]:.2f} of {expected} CPU{'s' if expected > 1 else ''} busy: other programs "
                        "(or a hypervisor) took CPU time, so these times are too slow: measure on an idle system")
    fastest = min(spread(e["elapsed_ns"])["median_s"] for e in nqueens)
    if fastest < SHORT_SOLVE_S and spec.n < N_RANGE[1]:
        better = min(N_RANGE[1], spec.n + math.ceil(math.log(SHORT_SOLVE_S / max(fastest, 1e-6), GROWTH_PER_N)))
        warn.append(f"a solve of N={spec.n} takes only {fastest * 1000:.1f} ms here, so timer ticks and scheduling "
                    f"noise weigh heavily on each: use --n {better} or more for solves of a second or longer")
    return warn


def _solve(work: Workdir, solver: str, n: int, threads: int, step: str) -> dict:
    r = work.run([solver, "--n", str(n), "--threads", str(threads)], step=step)
    if r.returncode:
        detail = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit status {r.returncode}"
        raise UserError(f"the N-queens solver failed on {work.t.name} ({detail})")
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    if doc["solutions"] != KNOWN_SOLUTIONS[n]:
        raise UserError(f"the solver counted {doc['solutions']} solutions for N={n}, not {KNOWN_SOLUTIONS[n]}: "
                        f"this build is broken or {work.t.name} miscalculates (overclocked? under-voltage?)")
    return doc


def _stress(work: Workdir, threads: int, seconds: int, step: str) -> dict:
    argv = ["stress-ng", "--cpu", str(threads), "--cpu-method", STRESS_METHOD, "--metrics-brief",
            "--timeout", f"{seconds}s", "--temp-path", work.path]
    r = work.run(argv, step=step)
    text = r.stdout + r.stderr
    if r.returncode:
        detail = text.strip().splitlines()[-1] if text.strip() else f"exit status {r.returncode}"
        raise UserError(f"stress-ng failed on {work.t.name} ({detail})")
    try:
        return {"threads": threads, **parse_stress_ng_metrics(text)}
    except ValueError as e:
        raise UserError(f"could not read stress-ng's metrics on {work.t.name} ({e}): "
                        "pass --stress-s 0 to go without them") from None


def run_bench(spec: BenchSpec, store: Store, *, transport: Transport | None = None,
              on_progress: Callable[[BenchProgress], None] | None = None) -> RunResult:
    """Measure, then store the complete run (kind "bench") and return it."""
    spec.validate()
    transport = transport or LocalTransport()
    remote = not isinstance(transport, LocalTransport)
    machine = _first_contact(transport)
    # A board's libraries may differ from ours: link statically for it even
    # when it shares our architecture.
    solver_local = build_program("nqueens", "nqueens", machine, static=True if remote else None)
    probe_local = build_probe(machine, static=True if remote else None)
    warnings: list[str] = []
    stress_version = _stress_version(spec, transport, warnings)
    now = datetime.now(timezone.utc)
    t0 = time.monotonic()

    with Workdir(transport) as work:
        solver = work.upload(solver_local, "nqueens")
        probe = work.upload(probe_local, "rtprobe")
        system = describe(_meta(work, probe))
        usable = _usable_cpus(work, system)
        threads = spec.resolve_threads(usable)
        stress_runs = len(threads) if stress_version else 0
        total = (spec.warmup + spec.repeat) * len(threads) + stress_runs
        step = 0

        def progress(what: str) -> None:
            if on_progress:
                on_progress(BenchProgress(step, total, what))

        results = {t: {"threads": t, "solutions": None, "elapsed_ns": [], "cpu_ns": [], "warmup_elapsed_ns": []}
                   for t in threads}
        for rnd in range(spec.warmup + spec.repeat):
            warm = rnd < spec.warmup
            for t in threads:
                what = (f"N={spec.n} · {t} thread{'s' if t > 1 else ''} · "
                        + (f"warm-up {rnd + 1}/{spec.warmup}" if warm else f"repetition {rnd - spec.warmup + 1}/{spec.repeat}"))
                progress(what)
                doc = _solve(work, solver, spec.n, t, step=what)
                entry = results[t]
                entry["solutions"] = doc["solutions"]
                if warm:
                    entry["warmup_elapsed_ns"].append(doc["elapsed_ns"])
                else:
                    entry["elapsed_ns"].append(doc["elapsed_ns"])
                    entry["cpu_ns"].append(doc["cpu_ns"])
                step += 1
        stress = []
        for t in threads[:stress_runs]:
            progress(f"stress-ng --cpu {t} --cpu-method {STRESS_METHOD} · {spec.stress_s} s")
            stress.append(_stress(work, t, spec.stress_s, step=f"stress-ng --cpu {t}"))
            step += 1
        after = _meta(work, probe)

    nqueens = [results[t] for t in threads]
    bench = {
        "benchmark": "nqueens", "n": spec.n, "solutions_expected": KNOWN_SOLUTIONS[spec.n],
        "repeat": spec.repeat, "warmup": spec.warmup, "nqueens": nqueens,
        "stress_ng": {"version": stress_version, "method": STRESS_METHOD, "duration_s": spec.stress_s,
                      "runs": stress} if stress_version else None,
        "system_after": {k: after.get(k) for k in ("throttled_hex", "loadavg", "cpufreq")},
    }
    host = system.get("hostname") or "localhost"
    result = RunResult(
        run_id=store.new_run_id(host, now), engine="nqueens", state="complete", host=host,
        start_time=now.isoformat(timespec="seconds"), kind="bench", label=spec.label,
        duration_s=time.monotonic() - t0,
        requested={"threads": spec.threads, "n": spec.n, "repeat": spec.repeat},
        config={"n": spec.n, "threads": threads, "repeat": spec.repeat, "warmup": spec.warmup,
                "stress_s": spec.stress_s, "stress_method": STRESS_METHOD, "usable_cpus": usable,
                "order": "interleaved", "target": "ssh" if remote else "local"},
        system=system, reproducer=spec.reproducer(),
        engine_argv=["nqueens", "--n", str(spec.n), "--threads", "T"],
        bench=bench, warnings=warnings + work.warnings + _warnings(spec, system, threads, usable, nqueens, after),
    )
    store.save(result)
    return result
