"""What a latency run should do, parsed and checked before anything starts.

Every number the user gives is checked here, against the bounds the engines
themselves accept (LIMITS), before anything is stored: an engine must never
be the one to refuse a value rtforge passed on.  Numbers are read as ASCII
digits only: Python's int() and float() also take '２' (a full-width digit),
'1_000', 'nan' and 'inf', none of which a user means as a number here.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field

from .. import cpulist
from ..errors import UserError
from ..units import format_span, parse_span_s, shown

ENGINES = ("probe", "cyclictest")
POLICIES = ("fifo", "rr")
PHASES = ("together", "spread")
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_INT_RE = re.compile(r"[0-9]+")
_FLOAT_RE = re.compile(_NUMBER)

# The bounds each value must keep, shared by both engines (the probe's own
# checks in probe/main.c; cyclictest 2.x keeps loops and its spike trigger in
# a C int and caps its histogram at 1000000 µs): (lowest, highest, unit).
INT32_MAX = 2**31 - 1
LIMITS: dict[str, tuple[float, float, str]] = {
    "duration_s": (1, 100 * 86400, "s"),          # the probe's --duration-s: 100 days
    "loops": (1, INT32_MAX, ""),                  # cyclictest's -l is an int
    "interval_us": (10, 10_000_000, "µs"),
    "priority": (1, 99, ""),                      # SCHED_FIFO and SCHED_RR
    "spike_us": (0, INT32_MAX, "µs"),             # cyclictest's --spike is an int of µs
    "histogram_us": (10, 1_000_000, "µs"),        # cyclictest's HIST_MAX
    "settle_s": (0, 3600, "s"),
    "poll_s": (0.05, 600, "s"),                   # progress polls (a hidden option, for tests)
}
# The probe measures CPUs 0 to CPU_SETSIZE - 1 (glibc's cpu_set_t).
MAX_CPUS = 1024
# Loads get this long to start before measuring (stress-ng forks its
# workers, `vm` faults in its memory, `io` creates its files): measured here,
# the first second under cpu,io,net was up to 20x worse than the rest.
DEFAULT_SETTLE_S = 3




def _bounds_text(name: str) -> str:
    lo, hi, unit = LIMITS[name]
    return f"{lo:,} to {hi:,}{' ' + unit if unit else ''}".replace(",", " ")


def check_range(option: str, name: str, value: float) -> None:
    lo, hi, _ = LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"{option} must be a number from {_bounds_text(name)}")
    if not lo <= value <= hi:
        raise UserError(f"{option} {value:g} is out of range: use {_bounds_text(name)}")


def parse_int(option: str, text: str, name: str) -> int:
    """A whole number in ASCII digits, within LIMITS[name]."""
    t = text.strip()
    if not _INT_RE.fullmatch(t):
        raise UserError(f"{option} wants a whole number from {_bounds_text(name)}, got '{shown(text)}'")
    value = int(t)
    if len(t) > 30:  # do not format a thousand-digit number into the message
        raise UserError(f"{option} is far out of range: use {_bounds_text(name)}")
    check_range(option, name, value)
    return value


def parse_number(option: str, text: str, name: str) -> float:
    """A decimal number ('12', '0.5') in ASCII digits, within LIMITS[name]."""
    t = text.strip()
    if not _FLOAT_RE.fullmatch(t) or len(t) > 30:
        raise UserError(f"{option} wants a number like 50 or 12.5 from {_bounds_text(name)}, got '{shown(text)}'")
    value = float(t)
    check_range(option, name, value)
    return value


def parse_duration(text: str) -> int:
    """'90s', '10m', '1h30m', '1.5h', '2d' -> whole seconds, 1 s to 100 days (a unit is required)."""
    seconds = parse_span_s(text)
    if seconds < 1:
        raise UserError(f"duration '{shown(text)}' is shorter than one second")
    if seconds > LIMITS["duration_s"][1]:
        raise UserError(f"duration '{shown(text)}' is longer than 100 days, the longest run the probe measures: "
                        "use --duration 100d or less")
    return round(seconds)


def format_duration(seconds: float) -> str:
    return format_span(seconds)


def parse_cpu_list(text: str, available: set[int] | list[int] | None = None, where: str = "here",
                   whose: str = "this machine's") -> list[int]:
    """'0-3,6' -> [0, 1, 2, 3, 6], in the kernel's grammar (rtforge.cpulist).
    Every number is checked before a range is expanded (a range up to
    99999999999 must not fill the memory): against `available` when it is
    known, else against the CPUs Linux and the probe can number at all."""
    try:
        ranges = cpulist.regions(text)
    except cpulist.CpuListError:
        ranges = []
    if not ranges:
        raise UserError(f"'{shown(text)}' is not a CPU list: use numbers and ranges, e.g. 0-3,6")
    allowed = sorted(available) if available is not None else None
    top = (allowed[-1] if allowed else -1) if allowed is not None else MAX_CPUS - 1
    cpus, what = cpulist.split(ranges, top, set(allowed) if allowed is not None else None)
    if what:
        if allowed is None:
            raise UserError(f"CPU {what} does not exist: Linux and the probe number CPUs from 0 to {MAX_CPUS - 1}")
        raise UserError(f"CPU {what} is not available {where}: {whose} CPUs are {format_cpu_list(allowed)}")
    return sorted(cpus)


def format_cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 6] -> '0-3,6'."""
    return cpulist.format_cpulist(cpus)


def parse_load_names(text: str | None, known: list[str]) -> list[str]:
    names: list[str] = []
    for raw in (text or "").split(","):
        name = raw.strip().lower()
        if not name or name == "none":
            continue
        if name not in known:
            raise UserError(f"unknown load '{shown(raw.strip())}': choose from {', '.join(known)} (comma-separated)")
        if name not in names:
            names.append(name)
    return names


def _choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(f"unknown {option.lstrip('-')} '{shown(value)}': choose {' or '.join(choices)}")


@dataclass
class LatencySpec:
    duration_s: int | None = 60
    loops: int | None = None
    interval_us: int = 200
    priority: int = 90
    policy: str = "fifo"
    cpus: list[int] | None = None        # None: every CPU of the target
    loads: list[str] = field(default_factory=list)
    label: str | None = None
    engine: str = "probe"
    spike_us: float | None = None        # None: half the interval
    histogram_us: int | None = None      # cyclictest -h; None: sized from the interval
    phase: str = "together"              # the probe's --phase
    settle_s: float | None = None        # None: DEFAULT_SETTLE_S with loads, 0 without
    checkpoint_s: int = 10
    trace: bool = False                  # rtla timerlat's auto-analysis beside the engine (measure/trace.py)

    def validate(self, available_cpus: set[int] | None = None, where: str = "here",
                 whose: str = "this machine's") -> None:
        """Every value within the bounds both engines accept (LIMITS)."""
        _choice("--engine", self.engine, ENGINES)
        _choice("--policy", self.policy, POLICIES)
        _choice("--phase", self.phase, PHASES)
        if self.engine == "cyclictest" and self.phase != "together":
            raise UserError("cyclictest starts its threads one after another and has no --phase spread: "
                            "drop --phase or measure with the probe engine")
        for option, name, value in (("--duration", "duration_s", self.duration_s), ("--loops", "loops", self.loops),
                                    ("--interval-us", "interval_us", self.interval_us),
                                    ("--priority", "priority", self.priority),
                                    ("--spike-us", "spike_us", self.spike_us),
                                    ("--histogram-us", "histogram_us", self.histogram_us),
                                    ("--settle-s", "settle_s", self.settle_s)):
            if value is not None:
                check_range(option, name, value)
        if self.cpus is not None:
            if not self.cpus:
                raise UserError("--cpus is empty: name at least one CPU, e.g. 0 or 0-3")
            if any(not isinstance(c, int) or c < 0 for c in self.cpus):
                raise UserError("--cpus holds something that is not a CPU number")
            parse_cpu_list(format_cpu_list(sorted(set(self.cpus))), available_cpus, where, whose)

    @property
    def settle(self) -> float:
        """Seconds the loads get to start before measuring."""
        if self.settle_s is not None:
            return float(self.settle_s)
        return float(DEFAULT_SETTLE_S) if self.loads else 0.0

    @property
    def expected_s(self) -> float | None:
        """How long the measurement should take, when that is known."""
        return expected_s(self.loops, self.duration_s, self.interval_us)

    @property
    def spike_threshold_ns(self) -> int:
        return round(self.spike_us * 1000) if self.spike_us is not None else self.interval_us * 500

    @property
    def cyclictest_histogram_us(self) -> int:
        """Sized from the interval: ten periods, at least 1 ms, so a sample
        must be very late indeed to fall out of it."""
        return self.histogram_us or int(min(LIMITS["histogram_us"][1], max(1000, 10 * self.interval_us)))

    def reproducer(self, host: str | None = None) -> str:
        """The command line that measures the same way (each option left at its default left out)."""
        argv = ["rtforge", "latency", *([host] if host else [])]
        if self.loops:
            argv += ["--loops", str(self.loops)]
        elif self.duration_s:
            argv += ["--duration", format_duration(self.duration_s)]
        argv += ["--interval-us", str(self.interval_us), "--priority", str(self.priority)]
        given: list[tuple[str, bool, str | None]] = [   # (flag, given, its value; None: a flag alone)
            ("--policy", self.policy != "fifo", self.policy),
            ("--cpus", self.cpus is not None, format_cpu_list(self.cpus) if self.cpus is not None else ""),
            ("--load", bool(self.loads), ",".join(self.loads)),
            ("--engine", self.engine != "probe", self.engine),
            ("--phase", self.phase != "together", self.phase),
            ("--spike-us", self.spike_us is not None, f"{self.spike_us:g}" if self.spike_us is not None else ""),
            ("--histogram-us", self.histogram_us is not None, str(self.histogram_us)),
            ("--settle-s", self.settle_s is not None, f"{self.settle_s:g}" if self.settle_s is not None else ""),
            ("--trace", bool(self.trace), None),
            ("--label", bool(self.label), self.label),
        ]
        for flag, yes, value in given:
            if yes:
                argv += [flag] if value is None else [flag, value]
        return shlex.join(argv)


def expected_s(loops: int | None, duration_s: float | None, interval_us: int | None) -> float | None:
    """How long a run should measure: loops win over a duration, as in the
    engines' command lines.  One rule for a spec and for a stored run."""
    if loops and interval_us:
        return loops * interval_us / 1e6
    if duration_s:
        return float(duration_s)
    return None


def available_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))
