"""cyclictest -v: every wake-up on a line of its own (rt-tests 0.84 to 2.x).

What ``-v`` prints (rt-tests' src/cyclictest/cyclictest.c, ``print_stat``
with verbose set, and main's set-up):

* a header: ``Max CPUs = N`` and ``Online CPUs = N`` (rt-tests 1.x and
  later), ``Using N cpus.`` (with an affinity mask), ``# /dev/cpu_dma_latency
  set to 0us``, then per thread ``Thread N Interval: I`` -- the interval
  *after* adding the -d distance, that is the next thread's -- and, pinned
  with -a, ``Thread N using cpu C.``;
* one line per wake-up, ``%8d:%8lu:%8ld`` -- thread, cycle number (from 0),
  latency in µs (ns with -N) -- printed by the main thread every 10 ms from
  a ring of 16384 values; ``--smi`` glues the SMI count after the latency;
  ``-o N`` (--oscope) prints one line per N wake-ups, their maximum, at the
  cycle of that maximum;
* with ``-q`` as well, the final status line of each thread (``T: n ...``)
  once the threads have stopped.  The main thread's last print comes up to
  10 ms before the threads stop, so the status line may count a few
  wake-ups more than were printed, and its Max may be one of them.

Every printed value is kept, so the histogram is exact (1 µs buckets that
never overflow); a status line, when there is one, adds what was not
printed: its maximum.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..hist import Histogram
from ..model import CpuResult
from ..raw.cyclictest import last_status
from .common import NUM, US, Parsed, Source, nsecs_warning

VALUE_RE = re.compile(rf"({NUM}):\s*({NUM}):\s*({NUM})(?:\s+{NUM})?")
HEADER_RE = re.compile(rf"(?:Max|Online) CPUs = {NUM}|Using {NUM} cpus\.")
INTERVAL_RE = re.compile(rf"Thread ({NUM}) Interval: ({NUM})")
CPU_RE = re.compile(rf"Thread ({NUM}) using cpu ({NUM})\.")
MAX_THREADS = 8192


@dataclass
class Thread:
    first_line: int
    cycles: int = 0                     # lines read, and the next cycle number expected
    counts: dict[int, int] = field(default_factory=dict)   # value -> wake-ups


@dataclass
class Verbose:
    """What the -v lines of a file said, thread by thread."""

    threads: dict[int, Thread] = field(default_factory=dict)
    intervals: dict[int, int] = field(default_factory=dict)   # as printed: the next thread's interval
    cpus: dict[int, int] = field(default_factory=dict)

    def take(self, src: Source, no: int, line: str) -> bool:
        """Read line if it is one of -v's; False if it is not."""
        if m := VALUE_RE.fullmatch(line):
            self._value(src, no, int(m[1]), int(m[2]), int(m[3]))
        elif m := INTERVAL_RE.fullmatch(line):
            self.intervals[int(m[1])] = int(m[2])
        elif m := CPU_RE.fullmatch(line):
            self.cpus[int(m[1])] = int(m[2])
        elif not HEADER_RE.fullmatch(line):
            return False
        return True

    def _value(self, src: Source, no: int, thread: int, cycle: int, value: int) -> None:
        t = self.threads.get(thread)
        if t is None:
            if len(self.threads) >= MAX_THREADS:
                raise src.error(no, f"a wake-up of a thread beyond the {MAX_THREADS:,}th: this is not cyclictest -v "
                                    "output")
            t = self.threads[thread] = Thread(no)
        if cycle != t.cycles:
            raise src.error(no, f"thread {thread}'s wake-up {cycle:,} follows its wake-up {t.cycles - 1:,}: lines "
                                "are missing, or cyclictest ran with -o (--oscope), which prints one line per N "
                                "wake-ups; import the whole output of a run without -o")
        t.cycles += 1
        t.counts[value] = t.counts.get(value, 0) + 1


def thread_intervals(v: Verbose) -> list[int] | None:
    """Each thread's interval from the 'Thread N Interval:' lines: cyclictest
    prints thread N's interval plus the -d distance (thread N+1's), so the
    distance is the step between two lines; one thread alone does not say it."""
    n = len(v.threads)
    if n < 2 or any(j not in v.intervals for j in range(n)):
        return None
    printed = [v.intervals[j] for j in range(n)]
    step = printed[1] - printed[0]
    if step < 0 or any(printed[j + 1] - printed[j] != step for j in range(n - 1)) or printed[0] - step <= 0:
        return None
    return [p - step for p in printed]


def read_verbose(src: Source, v: Verbose, statuses: list[tuple[int, str]], status_config: dict,
                 value_unit) -> Parsed:
    """The run the -v lines hold; statuses: the -q status lines, if any, and
    status_config what they say (interval, priority, policy)."""
    threads = sorted(v.threads)
    if threads != list(range(len(threads))):
        missing = next(j for j in range(len(threads) + 1) if j not in v.threads)
        raise src.error(v.threads[threads[-1]].first_line, f"the -v lines give wake-ups of thread {threads[-1]} but "
                                                            f"none of thread {missing}; the file is damaged")
    latest = last_status("\n".join(line for _, line in statuses))
    mins = [min(v.threads[j].counts) for j in threads]
    unit, how = value_unit(mins)
    cpus, warnings = [], []
    for j in threads:
        t = v.threads[j]
        counts = dict(t.counts)
        st = latest.get(j)
        if st is not None:
            if st["cycles"] < t.cycles:
                raise src.error(t.first_line, f"thread {j}'s status line counts {st['cycles']:,} wake-ups but "
                                              f"{t.cycles:,} were printed; the file is damaged")
            note = ""
            if st["cycles"] > t.cycles and st["max"] > max(counts):
                counts[st["max"]] = counts.get(st["max"], 0) + 1   # the one unprinted wake-up the file does state
                note = f", and its worst, {st['max']:,} {'ns' if unit != US else 'µs'}, from its status line"
            if st["cycles"] > t.cycles:
                warnings.append(f"cyclictest counted {st['cycles']:,} wake-ups of thread {j} but printed "
                                f"{t.cycles:,} (its last print comes up to 10 ms before the threads stop): the "
                                f"import holds the printed ones{note}")
        cpus.append(_cpu(j, counts, unit))
    config: dict = {"threads": len(threads), "resolution_ns": unit, **status_config}
    if "interval_us" not in config and (intervals := thread_intervals(v)):
        config["interval_us"] = intervals[0]
        if len(set(intervals)) > 1:
            config["thread_intervals_us"] = intervals
    if how:
        warnings.insert(0, nsecs_warning(how))
    if v.cpus and all(j in v.cpus for j in threads):
        for c in cpus:
            c.cpu = v.cpus[c.cpu]
        config["cpus"] = sorted({c.cpu for c in cpus})
    return Parsed(format="cyclictest-verbose", cpus=cpus, config=config, warnings=warnings)


def _cpu(thread: int, counts: dict[int, int], unit: int) -> CpuResult:
    """Every wake-up's value kept: a 1-unit histogram that cannot overflow."""
    values = np.asarray(sorted(counts), dtype=np.int64)
    n = np.asarray([counts[int(k)] for k in values], dtype=np.int64)
    lo = values * unit
    total = int(n.sum())
    return CpuResult(cpu=thread, count=total, min_ns=int(lo[0]), max_ns=int(lo[-1]),
                     sum_ns=sum(int(k) * int(c) for k, c in zip(lo, n)), overruns=None,
                     hist=Histogram(lo, lo.copy(), n, 0, None))
