"""The run store's SQLite index: its rows, how one is made from a result,
and how the file is created -- or refused (see runstore.py's docstring).

The index lists runs for speed; the run folders are the truth, and the
index is rebuilt from them whenever it is missing, of another version or
damaged.  It is only ever rebuilt when it is an rtforge index: the file
header's application id says so (older indexes: their two tables).  An
index of version 3 is upgraded in place instead (``_upgrade``): its rows
are those of version 4, so a store of thousands of runs is not re-read.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..model import RunResult
from ..stats import summarize_all

# 3: loads NULL when unknown (an import), '' when none.  4: start_utc (for
# `runs --since`), indexes for the order, labels and states, and the meta
# table holding the stamp of runs/ (runstore.py: lookups scan no folder).
INDEX_VERSION = 4
COLUMNS = (
    "run_id", "kind", "engine", "label", "host", "kernel_release", "preempt_model", "loads",
    "duration_s", "interval_us", "max_ns", "p99_ns", "start_time", "state", "source_sha256", "stored_at",
)
# beyond the row a user sees: what the folder's result.json was when read, and the start in UTC
_INSERT = f"INSERT OR REPLACE INTO runs ({','.join(COLUMNS)}, file_key, start_utc) " \
          f"VALUES ({','.join('?' * (len(COLUMNS) + 2))})"
# the order runs were stored in (the expression is runs_order's, so SQLite reads that index)
ORDER_KEY = "COALESCE(stored_at, start_time)"
_ORDER = f"ORDER BY {ORDER_KEY}, run_id"


@dataclass
class IndexRow:
    run_id: str
    kind: str
    engine: str
    label: str | None
    host: str
    kernel_release: str | None
    preempt_model: str | None
    loads: str | None
    duration_s: float | None
    interval_us: int | None
    max_ns: int | None
    p99_ns: int | None
    start_time: str
    state: str
    source_sha256: str | None
    stored_at: str | None

    @property
    def partial(self) -> bool:
        return self.state != "complete"


@dataclass
class DamagedRun:
    """A run folder whose result cannot be read: what is wrong, and where."""

    folder: str
    path: str
    why: str
    source_sha256: str | None = None


def _row(result: RunResult) -> tuple:
    # Bench runs have no wake-ups: no max or p99; their duration is wall time.
    summary = summarize_all(result) if result.kind != "bench" else None
    loads = result.config.get("loads")
    return (
        result.run_id, result.kind, result.engine, result.label, result.host,
        result.system.get("kernel_release"), result.system.get("preempt_model"),
        None if loads is None else ",".join(map(str, loads)), result.duration_s, result.config.get("interval_us"),
        summary.max_ns if summary else None, summary.p99_ns if summary else None, result.start_time, result.state,
        (result.source or {}).get("sha256"), result.stored_at,
    )


def start_utc(start_time: object) -> str | None:
    """A start time as UTC ISO text, which sorts and compares as the instant
    it is (start times carry their board's offset); None when not a time."""
    try:
        when = datetime.fromisoformat(start_time) if isinstance(start_time, str) else None
    except ValueError:
        return None
    if when is None or when.tzinfo is None:
        return None   # rtforge writes offsets; a time without one is no instant
    return when.astimezone(UTC).isoformat(timespec="seconds")


def insert_values(result: RunResult, key: str | None) -> tuple:
    """The values of _INSERT for a result whose folder has this file_key."""
    return _sql((*_row(result), key, start_utc(result.start_time)))


def _sql(values: tuple) -> tuple:
    """Values SQLite can store: a lone surrogate (from an undecodable argv or
    file name, or an escaped one in a hand-edited result) becomes U+FFFD."""
    return tuple(v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if isinstance(v, str) else v
                 for v in values)


_APPLICATION_ID = 0x72746667   # 'rtfg' in the database header: this file is an rtforge index
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _ours(path: Path) -> bool:
    """Whether runs.db may be rebuilt: an rtforge index (its application id,
    or an older index's two tables), or not a database at all (damage)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        header = f.read(100)
    if not header.startswith(_SQLITE_MAGIC) or len(header) < 100:
        return True   # a truncated or garbage file where the index belongs: rebuilt, with a warning
    if int.from_bytes(header[68:72], "big") == _APPLICATION_ID:
        return True
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
            version = db.execute("PRAGMA user_version").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return True   # damaged beyond reading: nobody's data
    # an index from before the application id: rtforge's tables and columns, nothing else
    return (not tables or (tables <= {"runs", "damaged"} and {"run_id", "file_key", "state"} <= columns)) \
        and version in (0, 1, 2, 3)


def _memory() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    _create(db)
    return db


def _create(db: sqlite3.Connection) -> None:
    cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "run_id" else c for c in COLUMNS)
    db.execute("DROP TABLE IF EXISTS runs")
    db.execute("DROP TABLE IF EXISTS damaged")
    db.execute("DROP TABLE IF EXISTS meta")
    db.execute(f"CREATE TABLE runs ({cols}, file_key TEXT, start_utc TEXT)")
    db.execute("CREATE INDEX runs_sha ON runs (source_sha256)")
    db.execute("CREATE TABLE damaged (folder TEXT PRIMARY KEY, path TEXT, why TEXT, file_key TEXT, "
               "source_sha256 TEXT)")
    _version_4(db)
    db.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
    db.commit()


def _version_4(db: sqlite3.Connection) -> None:
    """What version 4 adds to version 3's tables."""
    db.execute(f"CREATE INDEX runs_order ON runs ({ORDER_KEY}, run_id)")
    db.execute("CREATE INDEX runs_label ON runs (label)")
    db.execute("CREATE INDEX runs_state ON runs (state)")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute(f"PRAGMA user_version = {INDEX_VERSION}")


def _upgrade(db: sqlite3.Connection) -> bool:
    """A version-3 index made version 4 in place, in one transaction; False
    for any other version (rebuilt from the folders instead).  Its rows are
    kept: version 3 compared every folder with them at each open, so they
    are as current as the last rtforge left them, and the meta table starts
    without a stamp, so the first open compares every folder once more."""
    db.execute("BEGIN IMMEDIATE")   # two rtforges upgrading at once: one does it, the other sees it done
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version != 3:
            db.rollback()
            return version == INDEX_VERSION
        db.execute("ALTER TABLE runs ADD COLUMN start_utc TEXT")
        starts = db.execute("SELECT run_id, start_time FROM runs").fetchall()
        db.executemany("UPDATE runs SET start_utc = ? WHERE run_id = ?", ((start_utc(t), r) for r, t in starts))
        _version_4(db)
        db.commit()
        return True
    except BaseException:
        db.rollback()
        raise


def _read_only(e: sqlite3.OperationalError) -> bool:
    """The index cannot be written here (a read-only or full disk): index in memory."""
    text = str(e)
    return any(w in text for w in ("readonly", "read-only", "unable to open", "disk is full", "disk I/O error"))
