"""What every importer shares: the source file, errors that point at a line,
and turning one cyclictest thread's numbers into a ``CpuResult``.

Numbers in a file are bounded (``MAX_DIGITS``) before they are converted:
a damaged file must give an error naming its line, not an overflow deep in
numpy or SQLite, and Python refuses to convert very long digit strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..hist import Histogram
from ..model import CpuResult
from .source import EXPECTED, Source  # noqa: F401 -- the importers take both from here

# 10**15 µs is 31 years, and 10**15 samples would take millennia at 5 kHz:
# anything longer is damage, and values in ns stay far below int64's limit.
MAX_DIGITS = 15
MAX_VALUE = 10**MAX_DIGITS - 1
NUM = r"[0-9]{1,15}"

# ns per value: cyclictest prints µs, or ns with -N (its buckets then 1 ns wide).
NS, US = 1, 1000

TOP_SPIKES = 100

# Terminal control sequences of a non-quiet run (cursor up before each redraw).
ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


@dataclass
class Parsed:
    """What an importer read; ``import_file`` turns it into a stored run."""

    format: str
    cpus: list[CpuResult]
    config: dict[str, Any] = field(default_factory=dict)
    system: dict[str, Any] = field(default_factory=dict)
    requested: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    top_spikes: list[list[int]] = field(default_factory=list)
    command_line: str | None = None      # the file's own record of how cyclictest ran: shown, never run
    host: str | None = None
    start_time: str | None = None
    duration_s: float | None = None
    source_extra: dict[str, Any] = field(default_factory=dict)   # what else the file states (rtla's IRQ latency)
    trace: dict[str, Any] | None = None  # rtla's auto-analysis, as `latency --trace` keeps it


def clean_line(line: str) -> str:
    return (ESCAPE_RE.sub("", line) if "\x1b" in line else line).strip()


def to_int(src: Source, line: int, text: str, what: str) -> int:
    text = text.strip()
    if not re.fullmatch(NUM, text):
        raise src.error(line, f"expected {what} as a whole number of at most {MAX_DIGITS} digits, not {snippet(text)}")
    return int(text)


def ints(src: Source, line: int, text: str, what: str) -> list[int]:
    return [to_int(src, line, t, what) for t in text.split()]


def snippet(text: str, width: int = 40) -> str:
    text = text if len(text) <= width else text[: width - 1] + "…"
    return repr(text)


def lowest_highest(counts: dict[int, int] | list[int]) -> tuple[int, int] | None:
    """Lowest and highest bucket holding samples; None when all are empty."""
    items = counts.items() if isinstance(counts, dict) else enumerate(counts)
    used = [k for k, c in items if c]
    return (min(used), max(used)) if used else None


def check_extremes(src: Source, min_line: int, max_line: int, thread: int, counts, overflow: int, min_v: int,
                   max_v: int, size: int | None, unit: str) -> None:
    """cyclictest's own min and max must agree with its histogram.

    Both come from the same wake-ups (whole µs, or ns with -N), so the lowest
    used bucket is the minimum whenever any sample is in range, and the
    highest is the maximum when nothing overflowed.  A disagreement means
    the file was edited or damaged.
    """
    span = lowest_highest(counts)
    if span is not None and min_v != span[0]:
        raise src.error(min_line, f"thread {thread}'s minimum is {min_v} {unit} but its histogram starts at "
                                  f"{span[0]} {unit}; the file is damaged")
    if span is not None and not overflow and max_v != span[1]:
        raise src.error(max_line, f"thread {thread}'s maximum is {max_v} {unit} but its histogram, which lost "
                                  f"no samples, ends at {span[1]} {unit}; the file is damaged")
    if size is not None and overflow and max_v < size:
        raise src.error(max_line, f"thread {thread} has {overflow} samples beyond the {size}-bucket histogram "
                                  f"but its maximum is {max_v} {unit}; the file is damaged")
    if min_v > max_v:
        raise src.error(min_line, f"thread {thread}'s minimum ({min_v}) is above its maximum ({max_v}); "
                                  "the file is damaged")


def hist_cpu(cpu: int, counts: list[int], overflow: int, unit_ns: int, min_ns: int | None, max_ns: int | None,
             sum_ns: int | None, spikes: int | None = None) -> CpuResult:
    """One thread of a cyclictest histogram with every bucket: bucket k is the value k units."""
    used = [(k, c) for k, c in enumerate(counts) if c]
    return sparse_cpu(cpu, np.asarray([k for k, _ in used], dtype=np.int64),
                      np.asarray([c for _, c in used], dtype=np.int64), overflow, unit_ns, len(counts) - 1,
                      min_ns, max_ns, sum_ns, spikes)


def sparse_cpu(cpu: int, buckets: np.ndarray, counts: np.ndarray, overflow: int, unit_ns: int, last_bucket: int,
               min_ns: int | None, max_ns: int | None, sum_ns: int | None, spikes: int | None = None) -> CpuResult:
    """One thread from its non-empty buckets (numbers, counts); overflowed samples lie above last_bucket."""
    keep = counts > 0
    lo = buckets[keep] * unit_ns
    hist = Histogram(lo, lo.copy(), counts[keep].astype(np.int64), int(overflow), last_bucket * unit_ns)
    count = hist.total
    return CpuResult(cpu=cpu, count=count, min_ns=min_ns if count else None, max_ns=max_ns if count else None,
                     sum_ns=sum_ns if count else None, overruns=None, hist=hist, spikes=spikes)


def column_sums(counts: np.ndarray) -> list[int]:
    """Exact column sums (Python ints: numpy's int64 would wrap on hostile numbers)."""
    if counts.size == 0 or int(counts.max()) * len(counts) < 2**62:
        return [int(v) for v in counts.sum(axis=0)] if counts.size else [0] * counts.shape[1]
    return [sum(int(v) for v in col) for col in counts.T]


def exact_sum(buckets, counts) -> int:
    """Sum of the sampled values (in bucket units) of a histogram that lost none."""
    return sum(int(k) * int(c) for k, c in zip(buckets, counts) if c)


def top_spikes(spikes: list[tuple[int, int, int]]) -> list[list[int]]:
    """[cpu, t_ns, lat_ns] rows, largest latency first (stable for equal ones)."""
    ordered = sorted(spikes, key=lambda s: -s[2])
    return [list(s) for s in ordered[:TOP_SPIKES]]


def no_histogram_warning() -> str:
    return ("this output has no histogram (cyclictest ran without -h), so only min, average and max are known and "
            "no percentile is: next time, run cyclictest with -h N -q (N above the largest latency you expect), "
            "or measure with `rtforge latency --engine cyclictest`")


def nsecs_warning(how: str, size: int | None = None, overflow: int = 0, count: int = 0) -> str:
    """-N read from the file's own evidence (``how``); size: histogram buckets, if any."""
    if size is None:
        return (f"the values were read as nanoseconds (cyclictest -N, recognised by {how}); if the run did not use "
                "-N, import its --json file instead, which records the unit")
    lost = (f", so {overflow:,} of {count:,} samples fell beyond its {size} buckets (only wake-ups under {size} ns "
            "fit) and the percentiles among them are unknown") if overflow else ""
    return (f"the values are nanoseconds (cyclictest -N, recognised by {how}), and with -N cyclictest's histogram "
            f"buckets are 1 ns wide{lost}: next time, leave out -N for a histogram in µs")
