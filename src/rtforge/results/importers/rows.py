"""The histogram rows of cyclictest's text output, kept sparse.

cyclictest up to 1.x prints every bucket of ``-h N``, empty or not; rt-tests
2.x prints only the non-empty ones.  Either way only non-empty rows are
kept here, in flat int64 arrays: a ``-h 1000000`` file of 200 MB is mostly
zeros and must not become millions of Python lists.  An empty row is
still checked (its width, its bucket number), then forgotten.
"""

from __future__ import annotations

import re
from array import array

import numpy as np

from .cmdline import MAX_CPU
from .common import MAX_DIGITS, Source

ROW_RE = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}(?:[ \t]+[0-9]{{1,{MAX_DIGITS}}})+")


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS


class Rows:
    def __init__(self) -> None:
        self.width: int | None = None      # counts per row
        self.read = 0                      # rows read, empty ones included
        self.last = -1                     # the last bucket read
        self.first_line: int | None = None
        self.last_line: int | None = None
        self.gap_line: int | None = None   # first row after skipped buckets (rt-tests 2.x)
        self.empty_line: int | None = None  # first all-zero row (cyclictest before 2.x)
        self._buckets = array("q")
        self._lines = array("q")
        self._counts = array("q")
        self._zeros: str | None = None     # how an empty row looks after its bucket, in this file

    def add(self, src: Source, no: int, line: str) -> bool:
        """Take line if it is a histogram row ('bucket count count...'); False if it is not one."""
        head, _, rest = line.partition(" ")
        if rest == self._zeros and _number(head):
            # the common case of a long histogram, read without splitting the line
            self._empty(src, no, int(head))
            return True
        if line.count(" ") + line.count("\t") > MAX_CPU + 1:
            # (checked before the pattern: a row of 40,000 columns took a minute)
            raise src.error(no, f"a row of more than {MAX_CPU + 1:,} counts, one per CPU, where Linux numbers "
                                f"CPUs from 0 to {MAX_CPU:,}: this is not a cyclictest histogram")
        if not ROW_RE.fullmatch(line):
            return False
        parts = line.split()
        bucket, counts = int(parts[0]), [int(p) for p in parts[1:]]
        if not any(counts) and self.width in (None, len(counts)):
            self._zeros = rest
        if self.width is None:
            self.width = len(counts)
        elif len(counts) != self.width:
            raise src.error(no, f"expected {self.width} counts like the rows before, found {len(counts)}")
        if bucket <= self.last:
            raise src.error(no, f"expected a bucket above {self.last} (buckets count up), found bucket {bucket}; "
                                "the file is damaged or holds two outputs")
        if bucket != self.last + 1 and self.gap_line is None:
            self.gap_line = no
        if any(counts):
            self._buckets.append(bucket)
            self._lines.append(no)
            self._counts.extend(counts)
        elif self.empty_line is None:
            self.empty_line = no
        if self.gap_line is not None and self.empty_line is not None:
            raise src.error(max(self.gap_line, self.empty_line),
                            "the histogram skips buckets (as rt-tests 2.x does, printing only non-empty rows) but "
                            "also prints empty rows (as older versions do); the file is damaged")
        self.last = bucket
        self.read += 1
        self.first_line = self.first_line or no
        self.last_line = no
        return True

    def _empty(self, src: Source, no: int, bucket: int) -> None:
        """An all-zero row of the known width (what add does, for that case)."""
        if bucket <= self.last:
            raise src.error(no, f"expected a bucket above {self.last} (buckets count up), found bucket {bucket}; "
                                "the file is damaged or holds two outputs")
        if bucket != self.last + 1 and self.gap_line is None:
            self.gap_line = no
        if self.gap_line is not None:
            raise src.error(no, "the histogram skips buckets (as rt-tests 2.x does, printing only non-empty rows) "
                                "but also prints empty rows (as older versions do); the file is damaged")
        self.last = bucket
        self.read += 1
        self.last_line = no

    @property
    def sparse(self) -> bool:
        """Only non-empty rows were printed (rt-tests 2.x): the -h size is unknown."""
        return self.gap_line is not None

    @property
    def size(self) -> int:
        """Buckets of the histogram: all of them (every row printed), or at least
        up to the last non-empty one (rt-tests 2.x)."""
        return self.last + 1

    def matrix(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bucket numbers, line numbers, counts[row, column]) of the non-empty rows."""
        buckets = np.frombuffer(self._buckets, dtype=np.int64) if self._buckets else np.zeros(0, np.int64)
        lines = np.frombuffer(self._lines, dtype=np.int64) if self._lines else np.zeros(0, np.int64)
        counts = np.frombuffer(self._counts, dtype=np.int64) if self._counts else np.zeros(0, np.int64)
        return buckets, lines, counts.reshape(-1, self.width or 1)
