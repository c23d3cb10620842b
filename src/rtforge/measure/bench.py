"""`rtforge bench cpu`: what PREEMPT_RT costs in throughput.

The N-queens solver (package folder nqueens/, C) counts the solutions of an
N x N board with 1 and with all CPUs, R times each; stress-ng's cpu stressor
adds a second, standard figure (bogo ops/s) that other people's results can
be set against.  A benchmark is a run like a latency run: the same runner
(data/runner.sh) on the same target -- this machine or a board -- runs it,
its engine being a step script written here, with programs built for the
target's `uname -m` (static for boards, like the probe).  So it also
survives a dropped connection or a killed rtforge (`attach` and `fetch`
bring it in), and never runs beside another run on the same target.

Order matters:
  1. every argument is checked before anything connects or starts;
  2. the target is inspected (architecture, CPUs, stress-ng) before the
     first solve, so a missing tool fails in seconds, not after minutes;
  3. thread counts alternate (1, 4, 1, 4, ...) so that slow drift -- heat,
     throttling, someone else's load -- spreads over all of them instead of
     spoiling the last one;
  4. a benchmark stopped with Ctrl-C or failing is not a measurement of
     anything: nothing of it is kept.  (One whose rtforge was killed runs on
     and is stored when it ends, marked partial if it did not finish.)
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..device import Transport
from ..errors import UserError
from ..results.bench.rawsteps import GROWTH_PER_N
from ..results.model import RunResult
from ..results.store.runstore import Store
from ..signals import held_signals
from .engines import EngineCommand
from .launch import launch, prepare
from .probebuild import build_probe, build_program
from .session import BOARD_POLL_S, LOCAL_POLL_S, Progress, collect, follow, stop_run
from .target import RUNNER_TOOLS, make_target

DEFAULT_N = 12
N_RANGE = (4, 16)           # below 4 there is nothing to solve; 17 takes hours even on a PC
MAX_THREADS = 1024          # the solver's own limit
STRESS_METHOD = "matrixprod"  # fixed: stress-ng's default ("all") cycles through methods of different cost


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
        elif re.fullmatch(r"[0-9]{1,5}", p) and 1 <= int(p) <= MAX_THREADS:
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
            raise UserError(
                f"--stress-s {self.stress_s} is out of range: give 1 to 86400 seconds, or 0 to skip stress-ng"
            )

    def resolve_threads(self, usable_cpus: int) -> list[int]:
        out: list[int] = []
        for t in self.threads:
            value = usable_cpus if t == "all" else int(t)
            if value not in out:
                out.append(value)
        return out

    def reproducer(self) -> str:
        argv = [
            "rtforge",
            "bench",
            "cpu",
            *([self.host] if self.host else []),
            "--threads",
            ",".join(map(str, self.threads)),
            "--n",
            str(self.n),
            "--repeat",
            str(self.repeat),
            "--stress-s",
            str(self.stress_s),
        ]
        if self.warmup != 1:
            argv += ["--warmup", str(self.warmup)]
        if self.label:
            argv += ["--label", self.label]
        return shlex.join(argv)


# The engine: one line per step, each step's output into raw/steps/NNN.out
# (.err), a line in raw/steps.log when it succeeded (what progress counts),
# the system's metadata after the last step, and the wall clock.
_STEP = """step() {
    _n=$1; shift
    "$@" > "raw/steps/$_n.out" 2> "raw/steps/$_n.err" || { echo "step $_n ($1) failed with status $?" >&2; exit 1; }
    echo "$_n" >> raw/steps.log
}"""


def _plan(spec: BenchSpec, threads: list[int], stress: bool) -> list[dict]:
    steps = []
    for rnd in range(spec.warmup + spec.repeat):
        warm = rnd < spec.warmup
        for t in threads:
            what = f"N={spec.n} · {t} thread{'s' if t > 1 else ''} · " + (
                f"warm-up {rnd + 1}/{spec.warmup}" if warm else f"repetition {rnd - spec.warmup + 1}/{spec.repeat}"
            )
            steps.append({"kind": "nqueens", "threads": t, "warmup": warm, "what": what})
    for t in threads if stress else []:
        steps.append(
            {
                "kind": "stress",
                "threads": t,
                "what": f"stress-ng --cpu {t} --cpu-method {STRESS_METHOD} · {spec.stress_s} s",
            }
        )
    return steps


def _script(spec: BenchSpec, steps: list[dict]) -> str:
    lines = [
        "# rtforge benchmark steps (measure/bench.py), run by the runner as its engine",
        "set -u",
        'cd "$1" || exit 1',
        "mkdir -p raw/steps tmp",
        _STEP,
        'read -r _up _idle < /proc/uptime; echo "$_up" > raw/uptime',
    ]
    for i, s in enumerate(steps, 1):
        if s["kind"] == "nqueens":
            argv = ["./nqueens", "--n", str(spec.n), "--threads", str(s["threads"])]
        else:
            argv = [
                "stress-ng",
                "--cpu",
                str(s["threads"]),
                "--cpu-method",
                STRESS_METHOD,
                "--metrics-brief",
                "--timeout",
                f"{spec.stress_s}s",
                "--temp-path",
                "tmp",
            ]
        lines.append(f"step {i:03d} {shlex.join(argv)}")
    lines += [
        "./rtprobe --meta > raw/meta-after.json",
        'read -r _up _idle < /proc/uptime; echo "$_up" >> raw/uptime',
        "",
    ]
    return "\n".join(lines)


def _stress_version(spec: BenchSpec, target, contact, notes: list[str]) -> str | None:
    """stress-ng's version when its figure is wanted and it is there."""
    if spec.stress_s == 0:
        return None
    t = target.transport
    if "stress-ng" not in contact.tools:
        what = (
            f"stress-ng is not installed on {t.name}, so there is no bogo-ops figure: "
            "install it there (apt install stress-ng)"
        )
        if not spec.stress_optional:
            raise UserError(f"{what}, or pass --stress-optional to go without it (--stress-s 0 always does)")
        notes.append(f"{what} to compare with other tools' results")
        return None
    r = t.run(["stress-ng", "--version"], input=b"")
    m = re.search(r"version\s+(\S+)", r.stdout + r.stderr)
    return m.group(1) if m else "unknown"


def _failure(result: RunResult, store: Store) -> str:
    """Why a benchmark failed, from its own output (before it is dropped)."""
    raw = store.run_dir(result.run_id) / "raw"
    for w in result.warnings:
        if "miscalculates" in w:
            return w
    lines = []
    for path in (raw / "bench.out", *sorted((raw / "steps").glob("*.err"))[-1:]):
        if path.exists():
            lines += [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()][-1:]
    return "; ".join(lines) or result.end_reason or result.state


def run_bench(
    spec: BenchSpec,
    store: Store,
    *,
    transport: Transport | None = None,
    on_progress: Callable[[BenchProgress], None] | None = None,
    on_step: Callable[[str], None] | None = None,
    poll_s: float | None = None,
) -> RunResult:
    """Measure, then store the complete run (kind "bench") and return it."""
    spec.validate()
    step = on_step or (lambda s: None)
    target = make_target(store, transport)
    t = target.transport
    contact = prepare(
        target, {tool: (pkg, None) for tool, pkg in RUNNER_TOOLS.items()}, False, step, optional=("stress-ng",)
    )
    notes: list[str] = []
    stress_version = _stress_version(spec, target, contact, notes)
    usable = len(contact.cpus)
    threads = spec.resolve_threads(usable)
    # A board's libraries may differ from ours: link statically for it even
    # when it shares our architecture.
    static = None if target.local else True
    solver_local = build_program("nqueens", "nqueens", contact.machine, static=static)
    probe_local = build_probe(contact.machine, static=static)

    now = datetime.now(UTC)
    run_id = store.new_run_id(contact.hostname, now)
    d = f"{target.base}/runs/{run_id}"
    steps = _plan(spec, threads, stress_version is not None)
    result = RunResult(
        run_id=run_id,
        engine="nqueens",
        state="running",
        host=contact.hostname,
        start_time=now.isoformat(timespec="seconds"),
        kind="bench",
        label=spec.label,
        requested={"threads": spec.threads, "n": spec.n, "repeat": spec.repeat},
        config={
            "n": spec.n,
            "threads": threads,
            "repeat": spec.repeat,
            "warmup": spec.warmup,
            "stress_s": spec.stress_s,
            "stress_method": STRESS_METHOD,
            "usable_cpus": usable,
            "order": "interleaved",
            "target": "local" if target.local else "ssh",
            "steps": steps,
            "stress": {"version": stress_version, "method": STRESS_METHOD, "duration_s": spec.stress_s}
            if stress_version
            else None,
            "notes": notes,
        },
        reproducer=spec.reproducer(),
        engine_argv=["nqueens", "--n", str(spec.n), "--threads", "T"],
    )
    engine = EngineCommand("bench", ["sh", f"{d}/bench.sh", d], "steps.log")
    launched: list = []  # the runner, once it was asked to start: Ctrl-C from then on must stop it
    try:
        run, _ = launch(
            target,
            contact,
            store,
            result,
            engine,
            {"rtprobe": probe_local, "nqueens": solver_local, "bench.sh": _script(spec, steps)},
            loads=[],
            settle_s=0,
            check_rt=False,
            on_step=step,
            on_launch=launched.append,
        )
    except BaseException:
        if launched:
            with held_signals():
                _discard(launched[0], store)
        raise

    def progress(p: Progress) -> None:
        if on_progress:
            what = steps[min(p.steps, len(steps) - 1)]["what"] if p.state != "settling" else "starting"
            on_progress(BenchProgress(p.steps, len(steps), what))

    try:
        follow(run, None, poll_s=poll_s or (LOCAL_POLL_S if target.local else BOARD_POLL_S), on_progress=progress)
        result = collect(run, store)
    except BaseException:
        # Ctrl-C or an error: the benchmark is stopped on the target, and a
        # part of one measures nothing: nothing is kept, there or here.
        with held_signals():
            _discard(run, store)
        raise
    if result.state != "complete":
        why = _failure(result, store)
        store.delete(result.run_id)
        raise UserError(f"the benchmark failed on {t.name} ({why}): nothing was stored")
    return result


def _discard(run, store: Store) -> None:
    try:
        if run.poll(progress=False).alive:
            stop_run(run, "TERM")  # the step script is sh: in the background it ignores SIGINT
    except (UserError, OSError):
        pass
    if run.in_store(store):
        store.delete(run.run_id)
    else:
        try:
            run.remove()
        except (UserError, OSError):
            pass
