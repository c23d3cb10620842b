"""The monitor's histograms: the probe's hist.c buckets in Python, and the
runs they are stored as.

A histogram is {bucket index: count} over HIST_BUCKETS log-linear buckets
(exact below 128 ns, then 64 per power of two; ``bucket_lo``/``bucket_hi``
are hist.c's functions), stored as runs of consecutive bucket indices
``[[first, count, count, ...], ...]``.  ``decode_runs`` reads them as a
dict, ``Counts.from_runs`` as two arrays (what the store's hours and days
are read as: a year of them as dicts did not fit the memory a trend may
take).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping
from typing import Any

from ..hist import Histogram
from ..schema import Damaged

HIST_BUCKETS = 128 + 57 * 64


def bucket_index(v: int) -> int:
    if v < 128:
        return v
    shift = v.bit_length() - 1 - 6
    return 128 + (shift - 1) * 64 + ((v >> shift) - 64)


def bucket_lo(idx: int) -> int:
    if idx < 128:
        return idx
    j = idx - 128
    return (64 + j % 64) << (j // 64 + 1)


def bucket_hi(idx: int) -> int:
    if idx < 128:
        return idx
    return bucket_lo(idx) + (1 << ((idx - 128) // 64 + 1)) - 1


def decode_runs(runs: Any) -> dict[int, int]:
    """[[first, c, c, ...], ...] -> {bucket index: count}; Damaged when not that."""
    if not isinstance(runs, list):
        raise Damaged("its histogram is not a list of runs")
    out: dict[int, int] = {}
    for run in runs:
        if (not isinstance(run, list) or len(run) < 2 or not all(is_count(x) for x in run)
                or run[0] + len(run) - 1 > HIST_BUCKETS):
            raise Damaged("a histogram run is not [first bucket, counts...]")
        for i, c in enumerate(run[1:]):
            if c:
                out[run[0] + i] = out.get(run[0] + i, 0) + c
    return out


def encode_runs(buckets: Mapping[int, int]) -> list[list[int]]:
    """The probe's encoding: a run goes on over up to 3 empty buckets."""
    runs: list[list[int]] = []
    last = -10
    for idx in sorted(i for i, c in buckets.items() if c):
        if runs and idx - last <= 4:
            runs[-1].extend([0] * (idx - last - 1) + [buckets[idx]])
        else:
            runs.append([idx, buckets[idx]])
        last = idx
    return runs


def histogram(buckets: Mapping[int, int]) -> Histogram:
    return Histogram.from_buckets([[bucket_lo(i), bucket_hi(i), c] for i, c in sorted(buckets.items())]
                                  if buckets else [])


class Counts(Mapping[int, int]):
    """A histogram's {bucket: count} held as two arrays, read-only: what
    the store's hours and days are read as.  A year of hours as dicts was
    260 MB in `trend` (~670 used buckets an hour, ~90 bytes each); as
    arrays, 10 bytes a bucket."""

    __slots__ = ("idx", "n")

    def __init__(self, idx, n):
        self.idx, self.n = idx, n     # sorted int16 bucket indices (< HIST_BUCKETS), int64 counts > 0

    @classmethod
    def from_runs(cls, runs: Any) -> Counts:
        """decode_runs() into arrays, checked as it checks (but for a true or
        false among counts, read as 1 or 0), in numpy: a year of hours is 6
        million counts, and a Python loop over each took seconds."""
        import numpy as np  # here: commands that read no histogram start without numpy
        if not isinstance(runs, list) or not all(isinstance(r, list) and len(r) >= 2 for r in runs):
            raise Damaged("its histogram is not a list of runs")
        try:   # int64 only when every one is an int that fits (a float, a string, 2**64: another dtype)
            firsts = np.array([r[0] for r in runs])
            flat = np.array([c for r in runs for c in r[1:]])
        except (OverflowError, ValueError):
            raise Damaged("a histogram run is not [first bucket, counts...]") from None
        lengths = np.array([len(r) - 1 for r in runs], dtype=np.int64)
        if runs and (firsts.dtype.kind != "i" or flat.dtype.kind != "i" or firsts.min() < 0 or flat.min() < 0
                     or (firsts + lengths).max() > HIST_BUCKETS):
            raise Damaged("a histogram run is not [first bucket, counts...]")
        # a count's bucket: its run's first bucket plus its place in the run
        idx = np.repeat(firsts - np.cumsum(lengths) + lengths, lengths) + np.arange(len(flat))
        keep = flat > 0
        buckets, at = np.unique(idx[keep], return_inverse=True)
        n = np.zeros(len(buckets), dtype=np.int64)
        np.add.at(n, at, flat[keep])            # a bucket in two runs is added up, as decode_runs does
        return cls(buckets.astype(np.int16), n)

    def __getitem__(self, key: int) -> int:
        at = int(self.idx.searchsorted(key))
        if at < len(self.idx) and self.idx[at] == key:
            return int(self.n[at])
        raise KeyError(key)

    def __iter__(self) -> Iterator[int]:
        return iter(self.idx.tolist())

    def __len__(self) -> int:
        return len(self.idx)

    def items(self) -> ItemsView[int, int]:
        return _CountsItems(self)


class _CountsItems(ItemsView[int, int]):
    """Iterated from the arrays at once, not a lookup per key."""

    def __init__(self, counts: Counts):
        super().__init__(counts)
        self.counts = counts

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.counts.idx.tolist(), self.counts.n.tolist())


def is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63
