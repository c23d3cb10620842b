"""The two measurement engines -- our probe and the real cyclictest -- as
command lines for the runner, and how to read their progress.

The runner (data/runner.sh) starts the engine in a process group of its own
on the target, with the run's raw/ folder as its output; both engines end
on SIGINT/SIGTERM with their data written, so a stop keeps what was
measured.  Progress is whatever the engine appends as it goes, read by the
host in chunks from an offset: the probe's per-second series, cyclictest's
status lines (-M prints one on every new maximum).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..results.raw.cyclictest import last_status
from .spec import LatencySpec, format_cpu_list
from .trace import rtla_argv

PRIVILEGE_HINT = (
    "run as root, or give your user rtprio and memlock limits "
    "(e.g. '@realtime - rtprio 99' and '@realtime - memlock unlimited' in "
    "/etc/security/limits.d/realtime.conf, then log in again)"
)


@dataclass
class EngineCommand:
    name: str                     # the runner writes its output to raw/NAME.out
    argv: list[str]
    progress_file: str            # under raw/: what a poll reads on from its offset
    monitor: list[str] | None = None   # run beside the engine (telemetry for cyclictest)
    trace: list[str] | None = None     # --trace: rtla, restarted after each analysis (measure/trace.py)


def probe_argv(spec: LatencySpec, probe: str, raw: str, cpus: list[int]) -> list[str]:
    argv = [probe, "--out", raw, "--interval-us", str(spec.interval_us), "--priority", str(spec.priority),
            "--policy", spec.policy, "--checkpoint-s", str(spec.checkpoint_s), "--phase", spec.phase,
            "--cpus", format_cpu_list(cpus)]
    if spec.loops:
        argv += ["--loops", str(spec.loops)]
    elif spec.duration_s:
        argv += ["--duration-s", str(spec.duration_s)]
    if spec.spike_us is not None:
        argv += ["--spike-ns", str(spec.spike_threshold_ns)]
    return argv


def cyclictest_argv(spec: LatencySpec, raw: str, cpus: list[int]) -> list[str]:
    argv = ["cyclictest", "--mlockall", f"--priority={spec.priority}", f"--policy={spec.policy}",
            f"--interval={spec.interval_us}", "--distance=0", f"--threads={len(cpus)}",
            f"--affinity={format_cpu_list(cpus)}", f"--histogram={spec.cyclictest_histogram_us}",
            f"--json={raw}/cyclictest.json",
            # -M: print a status line only on a new max, cheap enough to
            # leave on for live progress.
            "--refresh_on_max"]
    if spec.loops:
        argv.append(f"--loops={spec.loops}")
    elif spec.duration_s:
        argv.append(f"--duration={spec.duration_s}")
    if spec.spike_us is not None:
        argv += [f"--spike={max(1, round(spec.spike_us))}"]
    return argv


def engine_command(spec: LatencySpec, probe: str, raw: str, cpus: list[int],
                   prefix: tuple[str, ...] = ()) -> EngineCommand:
    """The engine's command for the runner.  prefix runs another
    architecture's probe through an interpreter (tests: qemu-aarch64-static)."""
    trace = rtla_argv(spec.spike_threshold_ns, format_cpu_list(cpus), spec.priority) if spec.trace else None
    if spec.engine == "cyclictest":
        monitor = [*prefix, probe, "--monitor", "--out", f"{raw}/monitor", "--telemetry-s", "1"]
        return EngineCommand("cyclictest", cyclictest_argv(spec, raw, cpus), "cyclictest.out", monitor, trace)
    return EngineCommand("probe", [*prefix, *probe_argv(spec, probe, raw, cpus)], "series.jsonl", trace=trace)


@dataclass
class ProgressReader:
    """Folds the chunks a poll brings into the max so far per CPU (latency
    runs) or the number of steps done (benchmarks).  Only whole lines are
    read; `consumed` says how far, so the next poll asks from there."""
    engine: str
    cpus: list[int]
    max_ns: dict[int, int] = field(default_factory=dict)
    steps: int = 0
    consumed: int = 0

    def feed(self, chunk: bytes) -> None:
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self.consumed += len(whole)
        if not whole:
            return
        if self.engine == "probe":
            for line in whole.splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                for cpu, m in zip(self.cpus, row.get("max_ns") or []):
                    if m is not None and m > self.max_ns.get(cpu, -1):
                        self.max_ns[cpu] = m
        elif self.engine == "cyclictest":
            text = whole.decode(errors="replace")
            for t, s in last_status(text).items():
                if t < len(self.cpus) and s["cycles"]:
                    self.max_ns[self.cpus[t]] = max(self.max_ns.get(self.cpus[t], -1), s["max"] * 1000)
        else:  # a benchmark: one line per step done
            self.steps += whole.count(b"\n")
