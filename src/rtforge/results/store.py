"""The run store: one directory per run, and an SQLite index of them.

    <root>/runs/<run-id>/result.json   the run (results.model), the truth
    <root>/runs/<run-id>/raw/          what the engine wrote, untouched
    <root>/runs.db                     index for listing; rebuilt from the
                                       run directories whenever it is missing
                                       or of another schema version

A run is saved with state "running" (and its owner's pid) before it starts.
If the owner dies without finishing it (SIGKILL, power loss), the next
listing notices and finalizes it from the engine's last checkpoint, marked
partial: nothing measured is lost and nothing is invented.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .. import paths, procfs
from ..errors import UserError
from . import collect
from .model import RunResult
from .stats import summarize_all

INDEX_VERSION = 1
COLUMNS = (
    "run_id", "kind", "engine", "label", "host", "kernel_release", "preempt_model", "loads",
    "duration_s", "interval_us", "max_ns", "p99_ns", "start_time", "state", "source_sha256",
)

_INSERT = f"INSERT OR REPLACE INTO runs VALUES ({','.join('?' * len(COLUMNS))})"


@dataclass
class IndexRow:
    run_id: str
    kind: str
    engine: str
    label: str | None
    host: str
    kernel_release: str | None
    preempt_model: str | None
    loads: str
    duration_s: float | None
    interval_us: int | None
    max_ns: int | None
    p99_ns: int | None
    start_time: str
    state: str
    source_sha256: str | None

    @property
    def partial(self) -> bool:
        return self.state != "complete"


def _row(result: RunResult) -> tuple:
    # Bench runs have no wake-ups: no max or p99; their duration is wall time.
    summary = summarize_all(result) if result.kind != "bench" else None
    return (
        result.run_id, result.kind, result.engine, result.label, result.host,
        result.system.get("kernel_release"), result.system.get("preempt_model"),
        ",".join(result.config.get("loads") or []), result.duration_s, result.config.get("interval_us"),
        summary.max_ns if summary else None, summary.p99_ns if summary else None, result.start_time, result.state,
        (result.source or {}).get("sha256"),
    )


def _owner_alive(owner: dict | None) -> bool:
    if not owner:
        return False
    return procfs.start_ticks(owner["pid"]) == owner.get("start_ticks")


class Store:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root else paths.data_dir()
        self.runs_dir = self.root / "runs"
        self.db_path = self.root / "runs.db"

    # -- run directories -------------------------------------------------
    def new_run_id(self, host: str, when: datetime | None = None) -> str:
        when = when or datetime.now(timezone.utc)
        safe_host = re.sub(r"[^A-Za-z0-9.-]+", "_", host)[:32] or "host"
        return f"{when:%Y%m%d-%H%M%S}-{safe_host}-{secrets.token_hex(2)}"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def save(self, result: RunResult) -> Path:
        """Write result.json atomically, then index it."""
        d = self.run_dir(result.run_id)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / ".result.json.tmp"
        with open(tmp, "w") as f:
            f.write(result.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / "result.json")
        with self._db() as db:
            db.execute(_INSERT, _row(result))
        return d

    def load(self, run_id: str) -> RunResult:
        path = self.run_dir(run_id) / "result.json"
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(f"run {run_id} not found in {self.root}; `rtforge runs` lists the stored runs") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); the run directory is damaged") from None
        result = RunResult.from_dict(doc)
        if result.state == "running" and not _owner_alive(result.owner):
            result = collect.salvage(result, self.run_dir(run_id))
            self.save(result)
        return result

    def delete(self, run_id: str) -> None:
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)
        with self._db() as db:
            db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))

    # -- index -------------------------------------------------------------
    @contextmanager
    def _db(self):
        self.root.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.db_path, timeout=30)
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] != INDEX_VERSION:
                self._rebuild(db)
            yield db
            db.commit()
        finally:
            db.close()

    def _rebuild(self, db: sqlite3.Connection) -> None:
        """Index every run directory (the JSON files are the truth)."""
        cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "run_id" else c for c in COLUMNS)
        db.execute("DROP TABLE IF EXISTS runs")
        db.execute(f"CREATE TABLE runs ({cols})")
        db.execute("CREATE INDEX runs_sha ON runs (source_sha256)")
        if self.runs_dir.is_dir():
            for d in sorted(self.runs_dir.iterdir()):
                try:
                    result = RunResult.from_dict(json.loads((d / "result.json").read_text()))
                except (OSError, ValueError, KeyError, TypeError, UserError):
                    continue  # not a run directory, or damaged: leave it alone
                db.execute(_INSERT, _row(result))
        db.execute(f"PRAGMA user_version = {INDEX_VERSION}")
        db.commit()

    def reindex(self) -> int:
        with self._db() as db:
            self._rebuild(db)
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def list(self) -> list[IndexRow]:
        """All runs, oldest first; runs whose owner died are finalized first."""
        with self._db() as db:
            running = [r[0] for r in db.execute("SELECT run_id FROM runs WHERE state = 'running'")]
        for run_id in running:
            self.load(run_id)  # salvages when the owner is gone
        with self._db() as db:
            rows = db.execute(f"SELECT {','.join(COLUMNS)} FROM runs ORDER BY start_time, run_id").fetchall()
        return [IndexRow(*r) for r in rows]

    def find_by_source(self, sha256: str) -> str | None:
        with self._db() as db:
            row = db.execute("SELECT run_id FROM runs WHERE source_sha256 = ?", (sha256,)).fetchone()
        return row[0] if row else None

    def resolve(self, ref: str) -> str:
        """'last', a run id, or an unambiguous prefix of one -> run id."""
        rows = self.list()
        if not rows:
            raise UserError(f"no runs stored in {self.root}; measure one with `rtforge latency`")
        if ref == "last":
            return max(rows, key=lambda r: (r.start_time, r.run_id)).run_id
        ids = [r.run_id for r in rows]
        if ref in ids:
            return ref
        matches = [i for i in ids if i.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise UserError(f"no run matches '{ref}'; `rtforge runs` lists the stored runs")
        raise UserError(f"'{ref}' matches {len(matches)} runs ({', '.join(matches[:3])}, ...); give more of the id")
