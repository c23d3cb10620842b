"""The two measurement engines: our probe, and the real cyclictest.

Both run as their own process group in the run's raw/ directory and end on
SIGINT with their data written, so Ctrl-C keeps what was measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path

from ..errors import UserError
from ..results.cyclictest import last_status
from ..target import Transport
from .spec import LatencySpec, format_cpu_list

STOP_TIMEOUT_S = 15.0
PRIVILEGE_HINT = (
    "run as root, or give your user rtprio and memlock limits "
    "(e.g. '@realtime - rtprio 99' and '@realtime - memlock unlimited' in "
    "/etc/security/limits.d/realtime.conf, then log in again)"
)


class Engine(ABC):
    name: str

    def __init__(self, spec: LatencySpec, transport: Transport, probe: Path):
        self.spec = spec
        self.transport = transport
        self.probe = probe
        self.proc: subprocess.Popen | None = None

    def check(self) -> None:
        """Can this user run SCHED_FIFO threads and lock memory?  Asked of
        the probe binary, so the answer is the target's own."""
        r = self.transport.run([str(self.probe), "--check", "--priority", str(self.spec.priority),
                                "--policy", self.spec.policy])
        if r.returncode == 3:
            reason = r.stderr.strip().removeprefix("rtprobe: ")
            raise UserError(f"{reason}: {PRIVILEGE_HINT}")
        if r.returncode:
            raise RuntimeError(f"rtprobe --check failed ({r.returncode}): {r.stderr.strip()}")

    @abstractmethod
    def argv(self, raw: Path) -> list[str]:
        """The exact engine command, recorded in the result."""

    def start(self, raw: Path) -> None:
        self.proc = self.transport.spawn(self.argv(raw), log=raw / f"{self.name}.out")

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc else 0

    def stop(self) -> None:
        """End the measurement with its data written; idempotent."""
        _interrupt(self.proc)

    def raise_for_status(self, raw: Path) -> None:
        rc = self.proc.returncode if self.proc else 0
        if rc in (0, None, -signal.SIGINT):
            return
        out = raw / f"{self.name}.out"
        tail = out.read_text(errors="replace").strip().splitlines()[-3:] if out.exists() else []
        message = "; ".join(line.removeprefix("rtprobe: ") for line in tail)
        if rc == 3 or "Operation not permitted" in message:
            raise UserError(f"{self.name} could not start its RT threads ({message}): {PRIVILEGE_HINT}")
        raise RuntimeError(f"{self.name} exited with status {rc}: {message}")

    @abstractmethod
    def progress(self, raw: Path) -> dict[int, int]:
        """Max latency so far per CPU, in ns (what the engine has shown)."""


def _interrupt(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


class ProbeEngine(Engine):
    name = "probe"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pos = 0
        self._max: dict[int, int] = {}

    def argv(self, raw: Path) -> list[str]:
        s = self.spec
        argv = [str(self.probe), "--out", str(raw), "--interval-us", str(s.interval_us),
                "--priority", str(s.priority), "--policy", s.policy, "--checkpoint-s", str(s.checkpoint_s)]
        if s.cpus is not None:
            argv += ["--cpus", format_cpu_list(s.cpus)]
        if s.loops:
            argv += ["--loops", str(s.loops)]
        elif s.duration_s:
            argv += ["--duration-s", str(s.duration_s)]
        if s.spike_us is not None:
            argv += ["--spike-ns", str(round(s.spike_us * 1000))]
        return argv

    def progress(self, raw: Path) -> dict[int, int]:
        """Folds in the whole lines series.jsonl gained since the last call."""
        path = raw / "series.jsonl"
        cpus_path = raw / "probe.json"
        if not path.exists() or not cpus_path.exists():
            return self._max
        with open(path, "rb") as f:
            f.seek(self._pos)
            chunk = f.read()
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self._pos += len(whole)
        if whole:
            cpus = json.loads(cpus_path.read_text())["config"]["cpus"]
            for line in whole.splitlines():
                row = json.loads(line)
                for cpu, m in zip(cpus, row["max_ns"]):
                    if m is not None and m > self._max.get(cpu, -1):
                        self._max[cpu] = m
        return self._max


class CyclictestEngine(Engine):
    """The real cyclictest, plus the probe in --monitor mode for telemetry."""

    name = "cyclictest"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.monitor: subprocess.Popen | None = None

    def check(self) -> None:
        if not self.transport.which("cyclictest"):
            raise UserError("cyclictest is not installed: apt install rt-tests")
        super().check()

    def argv(self, raw: Path) -> list[str]:
        s = self.spec
        cpus = s.cpus if s.cpus is not None else sorted(os.sched_getaffinity(0))
        argv = ["cyclictest", "--mlockall", f"--priority={s.priority}", f"--policy={s.policy}",
                f"--interval={s.interval_us}", "--distance=0", f"--threads={len(cpus)}",
                f"--affinity={format_cpu_list(cpus)}", f"--histogram={s.cyclictest_histogram_us}",
                f"--json={raw / 'cyclictest.json'}",
                # -M: print a status line only on a new max, cheap enough to
                # leave on for live progress.
                "--refresh_on_max"]
        if s.loops:
            argv.append(f"--loops={s.loops}")
        elif s.duration_s:
            argv.append(f"--duration={s.duration_s}")
        if s.spike_us is not None:
            argv += [f"--spike={max(1, round(s.spike_us))}"]
        return argv

    def start(self, raw: Path) -> None:
        monitor_dir = raw / "monitor"
        monitor_dir.mkdir(exist_ok=True)
        self.monitor = self.transport.spawn(
            [str(self.probe), "--monitor", "--out", str(monitor_dir), "--telemetry-s", "1"],
            log=monitor_dir / "monitor.out")
        super().start(raw)

    def stop(self) -> None:
        super().stop()
        _interrupt(self.monitor)

    def poll(self) -> int | None:
        rc = super().poll()
        if rc is not None:
            _interrupt(self.monitor)
        return rc

    def progress(self, raw: Path) -> dict[int, int]:
        out = raw / "cyclictest.out"
        if not out.exists():
            return {}
        with open(out, "rb") as f:
            f.seek(max(0, out.stat().st_size - 8192))
            text = f.read().decode(errors="replace")
        cpus = self.spec.cpus if self.spec.cpus is not None else sorted(os.sched_getaffinity(0))
        return {cpus[t]: s["max"] * 1000 for t, s in last_status(text).items() if t < len(cpus) and s["cycles"]}


def make_engine(spec: LatencySpec, transport: Transport, probe: Path) -> Engine:
    return {"probe": ProbeEngine, "cyclictest": CyclictestEngine}[spec.engine](spec, transport, probe)
