"""The soak monitor's windows (probe --soak), read without trusting them.

A window is one line of ``windows/YYYY-MM-DD.jsonl`` in the monitor's
folder (on the board, or fetched into the store): per CPU the window's
count, min, max, sum, overruns, spikes and its log-linear histogram, plus
the window's telemetry and, over the alert threshold, its evidence.  Hours
and days are the same figures rolled up (``hours/YYYY-MM.jsonl``,
``days/YYYY.jsonl``); the probe writes one record per hour (day) and life,
so an hour cut by a restart has two records, which ``merge_rollups`` adds
up.  The format is documented in docs/monitoring.md.

Histograms are stored as runs of consecutive bucket indices of the
probe's hist.c buckets (buckets.py, whose names this module re-exports).

Everything here reads files someone may have edited, truncated or replaced
with a link: no symbolic link is followed below the folder given, nothing
but regular files is read, a file or a line larger than the bounds is
refused, and a line that is not a window is counted as damaged and skipped,
never fatal.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..hist import Histogram
from ..schema import Damaged
from .buckets import (  # noqa: F401  (re-exported: the histogram's names, where windows are read)
    HIST_BUCKETS,
    Counts,
    bucket_hi,
    bucket_index,
    bucket_lo,
    decode_runs,
    encode_runs,
    histogram,
    is_count,
)

MAX_LINE_BYTES = 8 << 20        # a window of 256 CPUs, every bucket used, is ~8 MB
MAX_FILE_BYTES = 512 << 20      # a day of windows of a 64-CPU board is ~100 MB
NAME_RE = {
    "windows": re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\.jsonl"),
    "hours": re.compile(r"[0-9]{4}-[0-9]{2}\.jsonl"),
    "days": re.compile(r"[0-9]{4}\.jsonl"),
}
P9999 = Fraction(9999, 10000)


def _opt_count(v: Any) -> bool:
    return v is None or is_count(v)


# ---- the model ---------------------------------------------------------------
@dataclass(slots=True)
class CpuFigures:
    """One CPU's wake-ups in a window, an hour or a day."""
    cpu: int
    count: int
    min_ns: int | None
    max_ns: int | None
    sum_ns: int
    overruns: int
    buckets: Mapping[int, int]     # a dict, or Counts as the store reads them
    spikes: int = 0

    def add(self, other: CpuFigures) -> None:
        self.count += other.count
        self.sum_ns += other.sum_ns
        self.overruns += other.overruns
        self.spikes += other.spikes
        self.min_ns = min((v for v in (self.min_ns, other.min_ns) if v is not None), default=None)
        self.max_ns = max((v for v in (self.max_ns, other.max_ns) if v is not None), default=None)
        mine = self.buckets if isinstance(self.buckets, dict) else dict(self.buckets)
        for i, c in other.buckets.items():
            mine[i] = mine.get(i, 0) + c
        self.buckets = mine

    def copy(self) -> CpuFigures:
        return CpuFigures(self.cpu, self.count, self.min_ns, self.max_ns, self.sum_ns, self.overruns,
                          dict(self.buckets), self.spikes)

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "count": self.count, "min_ns": self.min_ns, "max_ns": self.max_ns,
                "sum_ns": self.sum_ns, "overruns": self.overruns, "spikes": self.spikes,
                "h": encode_runs(self.buckets)}


def _cpu(d: Any, light: bool = False) -> CpuFigures:
    if not isinstance(d, dict):
        raise Damaged("a CPU entry is not an object")
    for k in ("cpu", "count", "sum_ns", "overruns"):
        if not is_count(d.get(k)):
            raise Damaged(f"a CPU entry's {k} is not a count")
    if not (_opt_count(d.get("min_ns")) and _opt_count(d.get("max_ns")) and _opt_count(d.get("spikes"))):
        raise Damaged("a CPU entry's min_ns, max_ns or spikes is not a count")
    if light:  # the figures without the histogram: a year of windows for a plot
        return CpuFigures(d["cpu"], d["count"], d.get("min_ns"), d.get("max_ns"), d["sum_ns"], d["overruns"], {},
                          d.get("spikes") or 0)
    buckets = decode_runs(d.get("h", []))
    if sum(buckets.values()) != d["count"]:
        raise Damaged(f"CPU {d['cpu']}'s histogram holds {sum(buckets.values())} wake-ups, not its count {d['count']}")
    return CpuFigures(d["cpu"], d["count"], d.get("min_ns"), d.get("max_ns"), d["sum_ns"], d["overruns"], buckets,
                      d.get("spikes") or 0)


def _text(d: dict, key: str) -> str:
    v = d.get(key)
    return v if isinstance(v, str) else "?"


@dataclass(slots=True)
class Window:
    life: str                   # one start of the monitor: boot id prefix and start time
    n: int                      # its number in that life
    start_ns: int               # wall clock (Unix ns)
    end_ns: int
    partial: bool               # shorter than window_s: a start, a stop
    host: str
    kernel: str                 # uname -r
    kver: str                   # uname -v
    interval_ns: int
    window_s: int
    cpus: list[CpuFigures]
    tel: dict = field(default_factory=dict)
    alert: dict | None = None
    lost: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.life, self.n)

    @property
    def max_ns(self) -> int | None:
        return max((c.max_ns for c in self.cpus if c.max_ns is not None), default=None)

    @property
    def count(self) -> int:
        return sum(c.count for c in self.cpus)

    @property
    def overruns(self) -> int:
        return sum(c.overruns for c in self.cpus)


def parse_window(d: Any, light: bool = False) -> Window:
    """A window line's object as a Window; Damaged (why) when it is not one.
    light: without the histograms (their buckets empty), for plots of maxima."""
    if not isinstance(d, dict) or d.get("v") != 1:
        raise Damaged("not a version-1 window")
    for k in ("n", "start_ns", "end_ns", "interval_ns", "window_s"):
        if not is_count(d.get(k)):
            raise Damaged(f"its {k} is not a count")
    if d["end_ns"] < d["start_ns"] or not isinstance(d.get("life"), str) or not isinstance(d.get("cpus"), list):
        raise Damaged("its times, life or CPUs are not a window's")
    alert, lost = d.get("alert"), d.get("lost_windows")
    return Window(d["life"], d["n"], d["start_ns"], d["end_ns"], d.get("partial") is True, _text(d, "host"),
                  _text(d, "kernel"), _text(d, "kver"), d["interval_ns"], d["window_s"],
                  [_cpu(c, light) for c in d["cpus"]],
                  d["tel"] if isinstance(d.get("tel"), dict) else {}, alert if isinstance(alert, dict) else None,
                  lost if isinstance(lost, int) and is_count(lost) else 0)


@dataclass
class Rollup:
    """An hour's or a day's windows, of one or more lives."""
    kind: str                   # "hour" or "day"
    key: int                    # its start, Unix seconds, UTC
    lives: list[str]
    kernels: list[tuple[str, str]]   # (uname -r, uname -v) of each life
    start_ns: int
    end_ns: int
    windows: int
    partial_windows: int
    covered_ns: int
    alerts: int
    spikes: int
    temp_max_mc: int | None
    throttled: int | None
    cpus: list[CpuFigures]

    @property
    def max_ns(self) -> int | None:
        return max((c.max_ns for c in self.cpus if c.max_ns is not None), default=None)

    def add(self, o: Rollup) -> None:
        self.lives += [x for x in o.lives if x not in self.lives]
        self.kernels += [x for x in o.kernels if x not in self.kernels]
        self.start_ns, self.end_ns = min(self.start_ns, o.start_ns), max(self.end_ns, o.end_ns)
        for k in ("windows", "partial_windows", "covered_ns", "alerts", "spikes"):
            setattr(self, k, getattr(self, k) + getattr(o, k))
        self.temp_max_mc = max((v for v in (self.temp_max_mc, o.temp_max_mc) if v is not None), default=None)
        self.throttled = None if self.throttled is None and o.throttled is None else \
            (self.throttled or 0) | (o.throttled or 0)
        mine = {c.cpu: c for c in self.cpus}
        for c in o.cpus:
            if c.cpu in mine:
                mine[c.cpu].add(c)
            else:
                self.cpus.append(c.copy())
        self.cpus.sort(key=lambda c: c.cpu)


def parse_rollup(d: Any) -> Rollup:
    if not isinstance(d, dict):
        raise Damaged("not an object")
    kind = "hour" if "hour" in d else "day" if "day" in d else None
    if kind is None or not is_count(d[kind]):
        raise Damaged("not an hour or a day")
    for k in ("start_ns", "end_ns", "windows", "partial_windows", "covered_ns", "alerts", "spikes"):
        if not is_count(d.get(k)):
            raise Damaged(f"its {k} is not a count")
    if not isinstance(d.get("cpus"), list):
        raise Damaged("its CPUs are not a list")
    tmax, thr = d.get("temp_max_mc"), d.get("throttled")
    return Rollup(kind, d[kind], [_text(d, "life")], [(_text(d, "kernel"), _text(d, "kver"))], d["start_ns"],
                  d["end_ns"], d["windows"],
                  d["partial_windows"], d["covered_ns"], d["alerts"], d["spikes"],
                  tmax if isinstance(tmax, int) and not isinstance(tmax, bool) else None,
                  thr if is_count(thr) else None, [_cpu(c) for c in d["cpus"]])


def merge_rollups(records: Iterable[Rollup]) -> list[Rollup]:
    """One record per hour (day): those of several lives added up."""
    by: dict[tuple[str, int], Rollup] = {}
    for r in records:
        if (r.kind, r.key) in by:
            by[(r.kind, r.key)].add(r)
        else:
            by[(r.kind, r.key)] = Rollup(**{**r.__dict__, "lives": list(r.lives), "kernels": list(r.kernels),
                                           "cpus": [c.copy() for c in r.cpus]})
    return sorted(by.values(), key=lambda r: r.key)


def roll(windows: Iterable[Window], kind: str) -> list[Rollup]:
    """Windows rolled into hours or days (UTC, by each window's start), as the probe does."""
    span = {"hour": 3600, "day": 86400}[kind]
    records = []
    for w in windows:
        start_s = w.start_ns // 1_000_000_000
        max_t = [t for t in w.tel.get("temp_max_mc") or [] if isinstance(t, int) and not isinstance(t, bool)]
        thr = w.tel.get("throttled")
        records.append(Rollup(kind, start_s - start_s % span, [w.life], [(w.kernel, w.kver)], w.start_ns, w.end_ns, 1,
                              int(w.partial), w.end_ns - w.start_ns, int(w.alert is not None),
                              sum(c.spikes for c in w.cpus), max(max_t, default=None), thr if is_count(thr) else None,
                              [c.copy() for c in w.cpus]))
    return merge_rollups(records)


def dedupe(windows: Iterable[Window]) -> list[Window]:
    """Each window once (by life and number), in time order."""
    seen: dict[tuple[str, int], Window] = {}
    for w in windows:
        seen.setdefault(w.key, w)
    return sorted(seen.values(), key=lambda w: (w.start_ns, w.key))


def merged_histogram(items: Iterable[Window | Rollup]) -> tuple[Histogram, int | None, int | None]:
    """Every CPU's wake-ups of the windows (rollups) as one population: its
    histogram, exact min and max."""
    import numpy as np
    total: dict[int, int] = {}
    dense = np.zeros(HIST_BUCKETS, dtype=np.int64)   # the Counts' sum, added in numpy
    lo = hi = None
    for it in items:
        for c in it.cpus:
            if isinstance(c.buckets, Counts):
                dense[c.buckets.idx] += c.buckets.n       # each index once per Counts
            else:
                for i, n in c.buckets.items():
                    total[i] = total.get(i, 0) + n
            if c.min_ns is not None:
                lo = c.min_ns if lo is None else min(lo, c.min_ns)
            if c.max_ns is not None:
                hi = c.max_ns if hi is None else max(hi, c.max_ns)
    for i in np.flatnonzero(dense).tolist():
        total[i] = total.get(i, 0) + int(dense[i])
    return histogram(total), lo, hi


# ---- reading, bounded and without links --------------------------------------
@dataclass
class Reading:
    """What was read, and what was not (path: why), for the caller to say."""
    damaged: list[tuple[str, str]] = field(default_factory=list)


def _open_dir(path: Path, dir_fd: int | None = None) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Damaged(f"{path} is a symbolic link or not a folder") from None
        raise


def _lines(name: str, dir_fd: int, max_bytes: int = MAX_FILE_BYTES) -> Iterator[bytes]:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Damaged(f"{name} is not a regular file")
        if st.st_size > max_bytes:
            raise Damaged(f"{name} is {st.st_size >> 20} MB, more than a monitor writes ({max_bytes >> 20} MB)")
        with os.fdopen(os.dup(fd), "rb") as f:
            while True:
                line = f.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return
                if len(line) > MAX_LINE_BYTES:
                    raise Damaged(f"{name} has a line over {MAX_LINE_BYTES >> 20} MB")
                if line.endswith(b"\n"):  # a last line without one is still being written, or cut off
                    yield line
    finally:
        os.close(fd)


def read_records(folder: Path, sub: str, parse, reading: Reading | None = None,
                 names: Iterable[str] | None = None) -> list:
    """Every record of folder/sub/*.jsonl (of the names given), parsed; bad lines and files in reading.damaged."""
    reading = reading if reading is not None else Reading()
    try:
        top = _open_dir(folder)
    except Damaged as e:
        reading.damaged.append((str(folder), str(e)))
        return []
    if top is None:
        return []
    out = []
    try:
        sub_fd = _open_dir(Path(sub), top) if sub else os.dup(top)
        if sub_fd is None:
            return []
        try:
            wanted = set(names) if names is not None else None
            for name in sorted(os.listdir(sub_fd)):
                if not NAME_RE.get(sub, re.compile(r".+\.jsonl")).fullmatch(name) or (wanted and name not in wanted):
                    continue
                where = f"{folder / sub / name}"
                try:
                    for no, line in enumerate(_lines(name, sub_fd), 1):
                        try:
                            out.append(parse(json.loads(line)))
                        except (ValueError, Damaged, RecursionError) as e:
                            reading.damaged.append((f"{where}:{no}", str(e)[:200]))
                except (Damaged, OSError) as e:
                    reading.damaged.append((where, str(e)[:200]))
        finally:
            os.close(sub_fd)
    except Damaged as e:
        reading.damaged.append((str(folder / sub), str(e)))
    finally:
        os.close(top)
    return out


def _pending_line(d: Any, light: bool = False) -> Window | Rollup:
    """A line of pending.jsonl: an hour or day in progress, or a line its
    last window was appending ({"file": ..., "line": ...}: probe/soakjournal.c)."""
    if isinstance(d, dict) and "file" in d:
        sub, _, name = d["file"].partition("/") if isinstance(d["file"], str) else ("", "", "")
        if sub not in NAME_RE or not NAME_RE[sub].fullmatch(name):
            raise Damaged("not a file of the monitor's")
        return parse_window(d.get("line"), light) if sub == "windows" else parse_rollup(d.get("line"))
    return parse_rollup(d)


def read_pending(folder: Path, reading: Reading | None = None, light: bool = False) -> list[Window | Rollup]:
    """What pending.jsonl holds: not filed yet, or being filed when the
    monitor stopped (the next start files it, each line once)."""
    return read_records(folder, "", lambda d: _pending_line(d, light), reading, names=["pending.jsonl"])


def read_windows(folder: Path, reading: Reading | None = None, days: Iterable[str] | None = None,
                 light: bool = False) -> list[Window]:
    """Every window of a monitor folder (or of the day files named), each once, in time order."""
    filed = read_records(folder, "windows", lambda d: parse_window(d, light), reading,
                         None if days is None else [f"{d}.jsonl" for d in days])
    if days is None:  # a window whose line the monitor was appending when it stopped
        filed += [w for w in read_pending(folder, reading, light) if isinstance(w, Window)]
    return dedupe(filed)


def pending_rollups(folder: Path, filed: Iterable[Rollup], reading: Reading | None = None) -> list[Rollup]:
    """The hours and days in progress (and closed, being filed) that `filed` lacks."""
    have = {(r.kind, r.key, r.lives[0]) for r in filed}
    # one filed since (a copy fetched before the stop, or the journal's own line) counts once
    return [r for r in read_pending(folder, reading)
            if isinstance(r, Rollup) and (r.kind, r.key, r.lives[0]) not in have]


def read_rollups(folder: Path, kind: str, reading: Reading | None = None, merged: bool = True) -> list[Rollup]:
    """The hours (days) a monitor filed, with those in pending.jsonl: merged,
    one per hour (day), or as filed, one per life."""
    records = read_records(folder, {"hour": "hours", "day": "days"}[kind], parse_rollup, reading)
    mine = [r for r in records + pending_rollups(folder, records, reading) if r.kind == kind]
    return merge_rollups(mine) if merged else mine


def read_events(folder: Path, reading: Reading | None = None) -> list[dict]:
    """The monitor's events, oldest first (events.1.jsonl holds the older ones)."""
    def parse(d):
        if not isinstance(d, dict) or not isinstance(d.get("event"), str) or not is_count(d.get("t_ns")):
            raise Damaged("not an event")
        return d
    events = read_records(folder, "", parse, reading, names=["events.1.jsonl", "events.jsonl"])
    return sorted(events, key=lambda e: e["t_ns"])
