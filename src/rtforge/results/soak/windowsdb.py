"""A board's fetched soak history, indexed for reading by range:
<store>/monitor/<host>/windows.db (SQLite).

The fetched files (folder.py) are the evidence, kept as the board
wrote them; this database is the store's view of them, so that what a
command costs follows what is new and the span it shows, never the whole
history (six months of a 4-CPU board is 52,000 windows and 260 MB of
lines; decoding them all cost 40 s and 4 GB at every fetch):

    windows      one row per window: its times, kernel, life, maximum (and
                 on which CPU), wake-ups, overruns, spikes, whether it alerted
    window_cpus  one row per window and CPU: its figures, no histogram
    rollups      the hours and days the board filed, one row per hour (day)
                 and life, with the histogram of every CPU merged (the
                 distributions a trend compares come from these)
    events       start, stop, gap, kernel, alert, ... as the board wrote them

Rows are added at fetch as the records are (each once, by its key: a
window by life and number, a rollup by kind, start and life, an event by
kind, time and life), in the same pass, so a fetch that was cut short and
repeated converges.  The database is rebuilt from the files, one file at a
time, when it is missing, damaged or of another SCHEMA_VERSION: a store
made before it existed is indexed once, at its first use.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ...errors import UserError
from .buckets import Counts, encode_runs
from .windows import CpuFigures, Reading, Rollup, Window, parse_rollup, read_records

SCHEMA_VERSION = 1
APP_ID = 0x72746D64   # "rtmd": a database this module made (the header says so)
NAME = "windows.db"

_SCHEMA = """
CREATE TABLE windows (life TEXT, n INTEGER, start_ns INTEGER, end_ns INTEGER, partial INTEGER, kernel TEXT,
    kver TEXT, max_ns INTEGER, max_cpu INTEGER, count INTEGER, overruns INTEGER, spikes INTEGER, alert INTEGER,
    PRIMARY KEY (life, n)) WITHOUT ROWID;
CREATE INDEX windows_by_time ON windows (start_ns);
CREATE TABLE window_cpus (life TEXT, n INTEGER, cpu INTEGER, count INTEGER, min_ns INTEGER, max_ns INTEGER,
    sum_ns INTEGER, overruns INTEGER, spikes INTEGER, PRIMARY KEY (life, n, cpu)) WITHOUT ROWID;
CREATE TABLE rollups (kind TEXT, key INTEGER, life TEXT, kernel TEXT, kver TEXT, start_ns INTEGER, end_ns INTEGER,
    windows INTEGER, partial_windows INTEGER, covered_ns INTEGER, alerts INTEGER, spikes INTEGER,
    temp_max_mc INTEGER, throttled INTEGER, count INTEGER, min_ns INTEGER, max_ns INTEGER, sum_ns INTEGER,
    overruns INTEGER, hist TEXT, PRIMARY KEY (kind, key, life)) WITHOUT ROWID;
CREATE TABLE events (event TEXT, t_ns INTEGER, life TEXT, doc TEXT, PRIMARY KEY (event, t_ns, life)) WITHOUT ROWID;
"""


@dataclass
class Summary:
    windows: int
    first_ns: int | None
    last_ns: int | None
    gaps: int


class MonitorDB:
    """The index of one board's folder in the store (open() makes or rebuilds it)."""

    def __init__(self, db: sqlite3.Connection, folder: Path):
        self.db = db
        self.folder = folder
        self.damaged: list[tuple[str, str]] = []   # lines and files a rebuild skipped (where, why)

    @classmethod
    def open(cls, folder: Path) -> MonitorDB:
        path = folder / NAME
        db = _connect(path)
        if db is None:
            for suffix in ("", "-journal", "-wal", "-shm"):
                try:
                    os.unlink(f"{path}{suffix}")
                except FileNotFoundError:
                    pass
            db = _connect(path, create=True)
            assert db is not None
            self = cls(db, folder)
            self.rebuild()
            return self
        return cls(db, folder)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> MonitorDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------
    def add_windows(self, windows: Iterable[Window]) -> None:
        rows, cpus = [], []
        for w in windows:
            top = max((c for c in w.cpus if c.max_ns is not None), key=lambda c: c.max_ns or 0, default=None)
            rows.append((w.life, w.n, w.start_ns, w.end_ns, int(w.partial), w.kernel, w.kver, w.max_ns,
                         top.cpu if top else None, w.count, w.overruns, sum(c.spikes for c in w.cpus),
                         int(w.alert is not None)))
            cpus += [(w.life, w.n, c.cpu, c.count, c.min_ns, c.max_ns, c.sum_ns, c.overruns, c.spikes)
                     for c in w.cpus]
        with self.db:
            self.db.executemany("INSERT OR IGNORE INTO windows VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            self.db.executemany("INSERT OR IGNORE INTO window_cpus VALUES (?,?,?,?,?,?,?,?,?)", cpus)

    def add_rollups(self, rollups: Iterable[Rollup]) -> None:
        rows = []
        for r in rollups:
            merged = _merged(r.cpus)
            rows.append((r.kind, r.key, r.lives[0], r.kernels[0][0], r.kernels[0][1], r.start_ns, r.end_ns,
                         r.windows, r.partial_windows, r.covered_ns, r.alerts, r.spikes, r.temp_max_mc, r.throttled,
                         merged.count, merged.min_ns, merged.max_ns, merged.sum_ns, merged.overruns,
                         json.dumps(encode_runs(merged.buckets), separators=(",", ":"))))
        with self.db:
            self.db.executemany(f"INSERT OR IGNORE INTO rollups VALUES ({','.join('?' * 20)})", rows)

    def add_events(self, events: Iterable[dict]) -> None:
        with self.db:
            self.db.executemany("INSERT OR IGNORE INTO events VALUES (?,?,?,?)",
                                [(e["event"], e["t_ns"], e.get("life") if isinstance(e.get("life"), str) else "",
                                  json.dumps(e, separators=(",", ":"))) for e in events])

    def rebuild(self) -> None:
        """Every record of the folder's files, one file at a time (memory follows a file, not the history)."""
        from .windows import NAME_RE, parse_window

        with self.db:
            for table in ("windows", "window_cpus", "rollups", "events"):
                self.db.execute(f"DELETE FROM {table}")
        reading = Reading()
        for sub, parse, add in (("windows", parse_window, self.add_windows), ("hours", parse_rollup, self.add_rollups),
                                ("days", parse_rollup, self.add_rollups)):
            for name in _names(self.folder / sub, NAME_RE[sub]):
                add(read_records(self.folder, sub, parse, reading, names=[name]))
        self.add_events(read_records(self.folder, "", _event, reading, names=["events.1.jsonl", "events.jsonl"]))
        self.damaged = reading.damaged

    # -- reading ---------------------------------------------------------------------
    def summary(self) -> Summary:
        n, first, last = self.db.execute("SELECT count(*), min(start_ns), max(end_ns) FROM windows").fetchone()
        gaps = self.db.execute("SELECT count(*) FROM events WHERE event = 'gap'").fetchone()[0]
        return Summary(n, first, last, gaps)

    def windows(self, since_ns: int | None = None, until_ns: int | None = None) -> list[Window]:
        """The windows whose start lies in [since, until), in time order, as light Windows:
        per CPU the figures without histograms; `alert` a marker dict for the alert windows."""
        lo, hi = since_ns if since_ns is not None else -1, until_ns if until_ns is not None else 2**63 - 1
        out = []
        for life, n, start, end, partial, kernel, kver, mx, cpu, count, over, spikes, alert in self.db.execute(
                "SELECT * FROM windows WHERE start_ns >= ? AND start_ns < ? ORDER BY start_ns, life, n", (lo, hi)):
            figs = [CpuFigures(cpu if cpu is not None else -1, count, None, mx, 0, over, {}, spikes)]
            out.append(Window(life, n, start, end, bool(partial), "", kernel, kver, 0, 0, figs, {},
                              {"alert": True} if alert else None))
        return out

    def rollups(self, kind: str, since_ns: int | None = None, until_ns: int | None = None) -> list[Rollup]:
        """The hours (days) filed, one per hour (day) and life, each with one merged CPU (cpu -1)."""
        lo, hi = since_ns if since_ns is not None else -1, until_ns if until_ns is not None else 2**63 - 1
        out = []
        for row in self.db.execute("SELECT * FROM rollups WHERE kind = ? AND start_ns >= ? AND start_ns < ? "
                                   "ORDER BY key, life", (kind, lo, hi)):
            (kind_, key, life, kernel, kver, start, end, windows, partial, covered, alerts, spikes, temp, thr, count,
             mn, mx, sm, over, hist) = row
            cpu = CpuFigures(-1, count, mn, mx, sm, over, Counts.from_runs(json.loads(hist)))
            out.append(Rollup(kind_, key, [life], [(kernel, kver)], start, end, windows, partial, covered, alerts,
                              spikes, temp, thr, [cpu]))
        return out

    def events(self) -> list[dict]:
        return [json.loads(doc) for (doc,) in self.db.execute("SELECT doc FROM events ORDER BY t_ns")]


def _merged(cpus: list[CpuFigures]) -> CpuFigures:
    out = CpuFigures(-1, 0, None, None, 0, 0, {}, 0)
    for c in cpus:
        out.add(c)
    return out


def _event(d):
    from ..schema import Damaged

    if not isinstance(d, dict) or not isinstance(d.get("event"), str) or not isinstance(d.get("t_ns"), int):
        raise Damaged("not an event")
    return d


def _names(folder: Path, pattern) -> Iterator[str]:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    yield from (n for n in names if pattern.fullmatch(n))


def _connect(path: Path, create: bool = False) -> sqlite3.Connection | None:
    """The database, or None when it must be made anew (missing, damaged, of another version).
    Never through a link: the store holds none."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OSError(f"{path} is not a regular file")
    if not create and not path.exists():
        return None
    db = sqlite3.connect(path, timeout=30)
    try:
        if create:
            db.execute(f"PRAGMA application_id = {APP_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.executescript(_SCHEMA)
            return db
        with closing(db.execute("PRAGMA application_id")) as c:
            app = c.fetchone()[0]
        with closing(db.execute("PRAGMA user_version")) as c:
            version = c.fetchone()[0]
        if app not in (APP_ID, 0):
            db.close()
            raise UserError(f"{path} is a database that is not rtforge's: rtforge never alters one; move it away")
        if app == APP_ID and version == SCHEMA_VERSION:
            db.execute("SELECT count(*) FROM windows").fetchone()   # a damaged file fails here
            return db
    except sqlite3.DatabaseError:
        pass   # damaged: made anew from the files, which are the truth
    db.close()
    return None
