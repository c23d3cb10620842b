"""Latency histograms as stored: sparse buckets plus what fell outside them.

A bucket is ``[lo_ns, hi_ns, count]`` with both bounds inclusive, so one
representation serves both engines:

* the probe's log-linear buckets (exact below 128 ns, then at most 1/64 of
  the value wide) never overflow;
* cyclictest measures whole microseconds, so its bucket for "k µs" is the
  single value ``lo = hi = k * 1000``; samples beyond its ``-h`` range are
  only counted (``overflow``) and their values are lost.

Percentiles follow the "inverted CDF" definition (the smallest sample value
``x`` with at least ``q * N`` samples ``<= x``).  With bucketed samples we
report the upper bound of the bucket holding that rank, clamped to the exact
min and max: never below the true percentile and at most one bucket width
above it.  A rank that falls among overflowed samples has no value and is
reported as ``None`` ("> range"), never invented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where a histogram is made or read, not with this module: every command that
# stores runs imports this module, and a board's `rtforge latency` should reach the board before
# spending ~0.1 s of CPU on numpy (32 of them start at once under `rtforge fleet`).

# Quantiles as exact fractions: 0.9999 * N in floating point can land one
# rank too high.
PERCENTILES = {
    "p50": Fraction(1, 2),
    "p99": Fraction(99, 100),
    "p999": Fraction(999, 1000),
    "p9999": Fraction(9999, 10000),
}


@dataclass
class Histogram:
    lo_ns: np.ndarray      # int64, ascending
    hi_ns: np.ndarray      # int64, inclusive upper bound
    count: np.ndarray      # int64
    overflow: int = 0      # samples above range_max_ns, values unknown
    range_max_ns: int | None = None  # None: the histogram cannot overflow
    # False when the file a run came from lost the count of samples beyond the
    # range (the blog CSV keeps no summary lines): overflow is then 0 by
    # construction, not by measurement, and every percentile a lower bound
    overflow_known: bool = True

    @classmethod
    def from_buckets(cls, buckets, overflow: int = 0, range_max_ns: int | None = None,
                     overflow_known: bool = True) -> Histogram:
        import numpy as np
        arr = np.asarray(buckets, dtype=np.uint64).reshape(-1, 3)
        # uint64 -> int64 is safe for any real latency (< 292 years).
        arr = arr.astype(np.int64)
        order = np.argsort(arr[:, 0], kind="stable")
        arr = arr[order]
        return cls(arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), int(overflow), range_max_ns,
                   overflow_known)

    @classmethod
    def empty(cls) -> Histogram:
        import numpy as np
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z.copy(), z.copy())

    def to_buckets(self) -> list[list[int]]:
        keep = self.count > 0
        import numpy as np
        return np.column_stack([self.lo_ns[keep], self.hi_ns[keep], self.count[keep]]).tolist()

    @property
    def in_range(self) -> int:
        return int(self.count.sum())

    @property
    def total(self) -> int:
        return self.in_range + self.overflow

    @property
    def kept(self) -> bool:
        """False when the engine kept no histogram at all (cyclictest without
        -h: range_max_ns < 0 and no bucket): then no percentile is known, which
        is not the same as every sample lying beyond a histogram's range."""
        return not (self.range_max_ns is not None and self.range_max_ns < 0 and self.in_range == 0)

    def quantile(self, q: Fraction | float, min_ns: int | None = None, max_ns: int | None = None) -> int | None:
        """Upper bound of the q-quantile in ns; None when it lies beyond the range."""
        n = self.total
        if n == 0:
            return None
        rank = max(1, math.ceil(Fraction(q) * n))
        import numpy as np
        cum = np.cumsum(self.count)
        if rank > (cum[-1] if len(cum) else 0):
            return None
        i = int(np.searchsorted(cum, rank, side="left"))
        value = int(self.hi_ns[i])
        if max_ns is not None:
            value = min(value, int(max_ns))
        if min_ns is not None:
            value = max(value, int(min_ns))
        return value

    def count_above(self, threshold_ns: int) -> tuple[int, bool]:
        """Samples certainly above threshold, and whether the count is exact.

        Buckets entirely above count fully; a bucket straddling the threshold
        makes the count a lower bound (exact=False).  Overflowed samples are
        above the threshold when the threshold is below the histogram range.
        """
        above = int(self.count[self.lo_ns > threshold_ns].sum())
        straddle = bool(((self.lo_ns <= threshold_ns) & (self.hi_ns > threshold_ns) & (self.count > 0)).any())
        if self.overflow:
            if self.range_max_ns is not None and threshold_ns <= self.range_max_ns:
                above += self.overflow
            else:
                straddle = True
        return above, not straddle

    def merged(self, other: Histogram) -> Histogram:
        """Sum of two histograms with the same bucket scheme (one run's CPUs)."""
        import numpy as np
        lo = np.concatenate([self.lo_ns, other.lo_ns])
        hi = np.concatenate([self.hi_ns, other.hi_ns])
        cnt = np.concatenate([self.count, other.count])
        keys, inv = np.unique(lo, return_inverse=True)
        his = np.zeros(len(keys), dtype=np.int64)
        his[inv] = hi
        counts = np.zeros(len(keys), dtype=np.int64)
        np.add.at(counts, inv, cnt)
        rng = self.range_max_ns if self.range_max_ns == other.range_max_ns else None
        return Histogram(keys.astype(np.int64), his, counts, self.overflow + other.overflow, rng,
                         self.overflow_known and other.overflow_known)
