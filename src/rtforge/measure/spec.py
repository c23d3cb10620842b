"""What a latency run should do, parsed and checked before anything starts."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from ..errors import UserError

ENGINES = ("probe", "cyclictest")
POLICIES = ("fifo", "rr")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str) -> int:
    """'90', '90s', '10m', '1h30m', '1.5h', '2d' -> whole seconds (>= 1)."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+", t):
        seconds = float(t)
    elif t and _DURATION_RE.sub("", t) == "":
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION_RE.findall(t))
    else:
        raise UserError(f"'{text}' is not a duration: use seconds or a unit, e.g. 90s, 10m, 2h, 1h30m")
    if seconds < 1:
        raise UserError(f"duration '{text}' is shorter than one second")
    return round(seconds)


def format_duration(seconds: float) -> str:
    s = int(round(seconds))
    parts = [(s // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    text = "".join(f"{n}{u}" for n, u in parts if n)
    return text or "0s"


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,6' -> [0, 1, 2, 3, 6]."""
    cpus: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m[2] is not None and int(m[2]) < int(m[1])):
            raise UserError(f"'{text}' is not a CPU list: use numbers and ranges, e.g. 0-3,6")
        cpus.update(range(int(m[1]), int(m[2] or m[1]) + 1))
    return sorted(cpus)


def format_cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 6] -> '0-3,6'."""
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def parse_load_names(text: str | None, known: list[str]) -> list[str]:
    names: list[str] = []
    for raw in (text or "").split(","):
        name = raw.strip().lower()
        if not name or name == "none":
            continue
        if name not in known:
            raise UserError(f"unknown load '{raw.strip()}': choose from {', '.join(known)} (comma-separated)")
        if name not in names:
            names.append(name)
    return names


@dataclass
class LatencySpec:
    duration_s: int | None = 60
    loops: int | None = None
    interval_us: int = 200
    priority: int = 90
    policy: str = "fifo"
    cpus: list[int] | None = None        # None: every CPU this process may use
    loads: list[str] = field(default_factory=list)
    label: str | None = None
    engine: str = "probe"
    spike_us: float | None = None        # None: half the interval
    histogram_us: int | None = None      # cyclictest -h; None: sized from the interval
    checkpoint_s: int = 10

    def validate(self, available_cpus: set[int] | None = None) -> None:
        if self.engine not in ENGINES:
            raise UserError(f"unknown engine '{self.engine}': choose {' or '.join(ENGINES)}")
        if self.policy not in POLICIES:
            raise UserError(f"unknown policy '{self.policy}': choose {' or '.join(POLICIES)}")
        if not 10 <= self.interval_us <= 10_000_000:
            raise UserError(f"--interval-us {self.interval_us} is out of range: use 10 to 10000000 µs")
        if not 1 <= self.priority <= 99:
            raise UserError(f"--priority {self.priority} is out of range: SCHED_FIFO priorities are 1 to 99")
        if self.loops is not None and self.loops < 1:
            raise UserError("--loops must be at least 1")
        if self.spike_us is not None and self.spike_us < 0:
            raise UserError("--spike-us must not be negative (0 turns the spike log off)")
        if self.histogram_us is not None and not 10 <= self.histogram_us <= 10_000_000:
            raise UserError(f"--histogram-us {self.histogram_us} is out of range: use 10 to 10000000 µs")
        if self.cpus is not None and available_cpus is not None:
            missing = sorted(set(self.cpus) - available_cpus)
            if missing:
                raise UserError(
                    f"CPU {format_cpu_list(missing)} is not available here: this machine's CPUs are "
                    f"{format_cpu_list(sorted(available_cpus))}"
                )

    @property
    def expected_s(self) -> float | None:
        """How long the measurement should take, when that is known."""
        if self.duration_s:
            return float(self.duration_s)
        if self.loops:
            return self.loops * self.interval_us / 1e6
        return None

    @property
    def cyclictest_histogram_us(self) -> int:
        """Sized from the interval: ten periods, at least 1 ms, so a sample
        must be very late indeed to fall out of it."""
        return self.histogram_us or max(1000, 10 * self.interval_us)

    def reproducer(self) -> str:
        argv = ["rtforge", "latency"]
        if self.loops:
            argv += ["--loops", str(self.loops)]
        else:
            argv += ["--duration", format_duration(self.duration_s or 0)]
        argv += ["--interval-us", str(self.interval_us), "--priority", str(self.priority)]
        if self.policy != "fifo":
            argv += ["--policy", self.policy]
        if self.cpus is not None:
            argv += ["--cpus", format_cpu_list(self.cpus)]
        if self.loads:
            argv += ["--load", ",".join(self.loads)]
        if self.engine != "probe":
            argv += ["--engine", self.engine]
        if self.spike_us is not None:
            argv += ["--spike-us", f"{self.spike_us:g}"]
        if self.histogram_us is not None:
            argv += ["--histogram-us", str(self.histogram_us)]
        if self.label:
            argv += ["--label", self.label]
        return shlex.join(argv)


def available_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))
