"""The run store: one folder per run, and an SQLite index of them.

    <root>/runs/<run-id>/result.json   the run (results.model), the truth
    <root>/runs/<run-id>/raw/          what the engine wrote, untouched
    <root>/runs.db                     index for listing, nothing more

The index heals itself: it is rebuilt from the run folders when it is
missing, of another schema version or unreadable (truncated, garbage; with
a warning), and every listing compares it with the folders (one stat per
run), so runs added, changed or removed by hand are noticed.  A folder whose
result.json is damaged (cut off, ``[]``, NaN, wrong types, a symbolic link,
a run id that is not its folder's name) is listed as damaged with why and
where, and never hides the others.  A read-only store is still read: the
index is then built in memory.

A run is saved with state "running" (and its owner's pid) before it starts.
If the owner dies without finishing it (SIGKILL, power loss), the next
listing notices and finalizes it from the engine's last checkpoint, marked
partial: nothing measured is lost and nothing is invented.

`last` is the run stored last (``stored_at``, set when a run is first
saved), not the one that started last: an import of an old file is last
right after it is imported.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .. import paths, procfs
from ..paths import sync_dir
from ..errors import UserError
from . import collect
from .model import RunResult
from .display import clean
from .runfolder import damaged_source, file_key, read_result
from .schema import RUN_ID_RE, Damaged
from .stats import summarize_all

log = logging.getLogger("rtforge")

INDEX_VERSION = 3   # 3: loads NULL when unknown (an import), '' when none
COLUMNS = (
    "run_id", "kind", "engine", "label", "host", "kernel_release", "preempt_model", "loads",
    "duration_s", "interval_us", "max_ns", "p99_ns", "start_time", "state", "source_sha256", "stored_at",
)
_INSERT = f"INSERT OR REPLACE INTO runs VALUES ({','.join('?' * (len(COLUMNS) + 1))})"
_ORDER = "ORDER BY COALESCE(stored_at, start_time), run_id"


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


def _sql(values: tuple) -> tuple:
    """Values SQLite can store: a lone surrogate (from an undecodable argv or
    file name, or an escaped one in a hand-edited result) becomes U+FFFD."""
    return tuple(v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if isinstance(v, str) else v
                 for v in values)


def _owner_alive(owner: dict | None) -> bool:
    if not owner:
        return False
    f = procfs.stat_fields(owner["pid"])  # a zombie (a runner not yet reaped by init) is not alive
    return bool(f) and f[0] != "Z" and int(f[19]) == owner.get("start_ticks")


class Store:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root else paths.data_dir()
        self.runs_dir = self.root / "runs"
        self.db_path = self.root / "runs.db"

    # -- run folders -------------------------------------------------------
    def new_run_id(self, host: str, when: datetime | None = None) -> str:
        """<date>-<time>-<host>-<4 hex digits>; an import names its file
        instead of a host, so imports made in one second differ early."""
        when = when or datetime.now(timezone.utc)
        safe_host = re.sub(r"[^A-Za-z0-9.-]+", "_", host)[:32].strip("._") or "host"
        return f"{when:%Y%m%d-%H%M%S}-{safe_host}-{secrets.token_hex(2)}"

    def run_dir(self, run_id: str) -> Path:
        """runs/<run_id>; UserError for an id that could name another place."""
        if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
            raise UserError(f"'{run_id}' is not a run id (letters, digits, '.', '_', '+', '-'); "
                            "`rtforge runs` lists the stored runs")
        return self.runs_dir / run_id

    def _writable_root(self) -> None:
        """The store's folders, made if needed; UserError when they cannot be."""
        for d in (self.root, self.runs_dir):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise UserError(f"the run store {d} is not a folder: give --results-dir a folder") from None
            except OSError as e:
                raise UserError(paths.os_error_sentence(d, e, "create the run store")) from None

    def save(self, result: RunResult) -> Path:
        """Write result.json atomically (synced, renamed), then index it."""
        d = self.run_dir(result.run_id)
        self._writable_root()
        try:
            d.mkdir(exist_ok=True)
        except OSError as e:
            raise UserError(paths.os_error_sentence(d, e, "create the run folder")) from None
        if d.is_symlink() or not d.is_dir():
            raise UserError(f"{d} is not a run folder (a symbolic link or a file); move it out of the store")
        if result.stored_at is None:
            result.stored_at = self._stored_at(result.run_id) or _now()
        paths.write_atomic(d / "result.json", result.to_json(), fixed_tmp=True)
        try:
            with self._index() as db:
                db.execute(_INSERT, _sql((*_row(result), file_key(d))))
        except UserError as e:
            log.warning("%s; the run is saved and the index is rebuilt from the run folders later", e)
        return d

    def staging(self) -> Path:
        """A new hidden folder in the store to build a run in (see add)."""
        self._writable_root()
        try:
            return Path(tempfile.mkdtemp(dir=self.runs_dir, prefix=".import-"))
        except OSError as e:
            raise UserError(paths.os_error_sentence(self.runs_dir, e, "write into the run store")) from None

    def add(self, result: RunResult, staging: Path) -> Path:
        """Make a staging folder (raw files inside) the run folder of result:
        result.json is written into it, then the folder is renamed into place,
        so a run appears whole or not at all.  The run id changes if taken."""
        result.stored_at = _now()
        for _ in range(100):
            d = self.run_dir(result.run_id)
            paths.write_atomic(staging / "result.json", result.to_json())
            try:
                os.rename(staging, d)  # refuses to replace an existing, non-empty folder
                break
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                    raise UserError(paths.os_error_sentence(d, e, "store the run")) from None
            head, _, _ = result.run_id.rpartition("-")
            result.run_id = f"{head}-{secrets.token_hex(2)}"  # same second and host: another suffix
        else:
            raise UserError(f"no free run id like {result.run_id} in {self.runs_dir}; try again")
        sync_dir(self.runs_dir)
        try:
            with self._index() as db:
                db.execute(_INSERT, _sql((*_row(result), file_key(d))))
        except UserError as e:
            log.warning("%s; the run is stored and the index is rebuilt from the run folders later", e)
        return d

    def _stored_at(self, run_id: str) -> str | None:
        """When a run already in the store was first saved (a run object made anew keeps it)."""
        try:
            return read_result(self.runs_dir / run_id).stored_at
        except Damaged:
            return None

    def load(self, run_id: str) -> RunResult:
        d = self.run_dir(run_id)
        if not d.exists() and not d.is_symlink():
            raise UserError(f"run {run_id} not found in {self.root}; `rtforge runs` lists the stored runs")
        try:
            if d.is_symlink():
                raise Damaged("its folder is a symbolic link")
            result = read_result(d)
        except Damaged as e:
            raise UserError(f"run {run_id} is damaged: {d / 'result.json'}: {e}; "
                            "repair or delete that folder, or import the run again") from None
        if result.state == "running" and not _owner_alive(result.owner):
            result = collect.salvage(result, d)
            try:
                self.save(result)
            except UserError as e:  # a read-only store: show it salvaged, store it later
                log.warning("%s; run %s is shown finalized but stays 'running' on disk", e, run_id)
        return result

    def delete(self, run_id: str) -> None:
        """Forget a run that never really started (a cleanup on a failed
        start): remove, without complaint when it is already gone."""
        try:
            self.remove(run_id)
        except UserError:
            pass

    # -- index ---------------------------------------------------------------
    @contextmanager
    def _index(self):
        """The index, in step with the run folders."""
        db = self._open()
        try:
            try:
                self._sync(db)
                db.commit()
            except sqlite3.OperationalError as e:
                if not _read_only(e):
                    raise
                db.close()  # a read-only store: index it in memory
                db = _memory()
                self._sync(db)
            yield db
            db.commit()
        except sqlite3.OperationalError as e:
            if "locked" in str(e):
                raise UserError(f"the run store's index {self.db_path} stayed locked by another rtforge for 30 s; "
                                "try again when it is done") from None
            raise UserError(f"cannot use the run store's index {self.db_path} ({e}): check the folder, "
                            "or delete runs.db to have it rebuilt") from None
        finally:
            db.close()

    def _open(self) -> sqlite3.Connection:
        if not self.root.is_dir():
            if self.root.exists():
                raise UserError(f"the run store {self.root} is not a folder: give --results-dir a folder")
            return _memory()  # nothing stored yet; reading must not create the store
        try:
            db = sqlite3.connect(self.db_path, timeout=30)
        except sqlite3.Error:
            return _memory()  # cannot even open it (a read-only folder without runs.db)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == INDEX_VERSION:
                check = db.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise sqlite3.DatabaseError(check)
                db.execute("SELECT COUNT(*) FROM runs").fetchone()
                db.execute("SELECT COUNT(*) FROM damaged").fetchone()
                return db
            _create(db)
            return db
        except sqlite3.OperationalError as e:
            if "locked" in str(e):
                db.close()
                raise UserError(f"the run store's index {self.db_path} stayed locked by another rtforge for 30 s; "
                                "try again when it is done") from None
            if _read_only(e):
                db.close()
                return _memory()
            reason = e
        except sqlite3.DatabaseError as e:
            reason = e
        db.close()
        log.warning("the run index %s is unreadable (%s): rebuilding it from the run folders", self.db_path, reason)
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                Path(f"{self.db_path}{suffix}").unlink(missing_ok=True)
            except OSError:
                return _memory()
        try:
            db = sqlite3.connect(self.db_path, timeout=30)
            _create(db)
            return db
        except sqlite3.Error:
            return _memory()

    def _sync(self, db: sqlite3.Connection) -> None:
        """Index the folders that are new or whose result.json changed; forget the gone."""
        on_disk: dict[str, str] = {}
        if self.runs_dir.is_dir():
            with os.scandir(self.runs_dir) as it:
                for entry in it:
                    if entry.name.startswith("."):
                        continue  # the temporary folders of imports and fetches
                    key = file_key(Path(entry.path))
                    if key is not None:
                        on_disk[entry.name] = key
        indexed = dict(db.execute("SELECT run_id, file_key FROM runs").fetchall())
        indexed.update(db.execute("SELECT folder, file_key FROM damaged").fetchall())
        by_db = {_sql((name,))[0]: name for name in on_disk}  # the index holds names as SQLite can
        for gone in indexed.keys() - by_db.keys():
            db.execute("DELETE FROM runs WHERE run_id = ?", (gone,))
            db.execute("DELETE FROM damaged WHERE folder = ?", (gone,))
        for db_name, name in by_db.items():
            if indexed.get(db_name) != on_disk[name]:
                self._index_folder(db, name, on_disk[name])

    def _index_folder(self, db: sqlite3.Connection, name: str, key: str) -> None:
        db.execute("DELETE FROM runs WHERE run_id = ?", _sql((name,)))
        db.execute("DELETE FROM damaged WHERE folder = ?", _sql((name,)))
        folder = self.runs_dir / name
        try:
            if folder.is_symlink() or not folder.is_dir():
                raise Damaged("it is not a folder but a symbolic link or a file")
            if not RUN_ID_RE.fullmatch(name):
                raise Damaged("its name is not a run id")
            result = read_result(folder)
            db.execute(_INSERT, _sql((*_row(result), key)))
        except Damaged as e:
            where = str(folder / "result.json") if folder.is_dir() and not folder.is_symlink() else str(folder)
            db.execute("INSERT OR REPLACE INTO damaged VALUES (?,?,?,?,?)",
                       _sql((name, where, str(e), key, damaged_source(folder))))

    def reindex(self) -> int:
        """Rebuild the index from the run folders; the number of readable runs."""
        with self._index() as db:
            db.execute("DELETE FROM runs")
            db.execute("DELETE FROM damaged")
            self._sync(db)
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def list(self) -> list[IndexRow]:
        """All readable runs, in the order they were stored; runs whose owner
        died are finalized first."""
        with self._index() as db:
            running = [r[0] for r in db.execute("SELECT run_id FROM runs WHERE state = 'running'")]
        for run_id in running:
            try:
                self.load(run_id)  # salvages when the owner is gone
            except UserError:
                pass  # damaged meanwhile: the next query lists it so
        with self._index() as db:
            rows = db.execute(f"SELECT {','.join(COLUMNS)} FROM runs {_ORDER}").fetchall()
        return [IndexRow(*r) for r in rows]

    def damaged(self) -> list[DamagedRun]:
        """Run folders that could not be read, with why and where."""
        with self._index() as db:
            rows = db.execute("SELECT folder, path, why, source_sha256 FROM damaged ORDER BY folder").fetchall()
        return [DamagedRun(folder, path, why, sha) for folder, path, why, sha in rows]

    def find_by_source(self, sha256: str) -> str | None:
        """The run imported from a file with this sha256, damaged or not."""
        with self._index() as db:
            row = db.execute("SELECT run_id FROM runs WHERE source_sha256 = ?", (sha256,)).fetchone()
            row = row or db.execute("SELECT folder FROM damaged WHERE source_sha256 = ?", (sha256,)).fetchone()
        return row[0] if row else None

    def resolve(self, ref: str) -> str:
        """A run reference -> run id: 'last' (the run stored last), a run id, a
        unique prefix of one, or a unique label.  An ambiguous reference lists
        its candidates; one that names a damaged folder says what is wrong."""
        rows = self.list()
        if not rows:
            raise UserError(f"no runs stored in {self.root}; measure one with `rtforge latency`")
        if ref == "last":
            return rows[-1].run_id
        if any(r.run_id == ref for r in rows):
            return ref
        matches = [r for r in rows if ref and (r.label == ref or r.run_id.startswith(ref))]
        if len(matches) == 1:
            return matches[0].run_id
        if not matches:
            broken = [d for d in self.damaged() if d.folder == ref or (ref and d.folder.startswith(ref))]
            if len(broken) == 1:
                raise UserError(f"run {broken[0].folder} is damaged: {broken[0].path}: {broken[0].why}; "
                                "repair or delete that folder, or import the run again")
            raise UserError(f"no run has the id or label '{clean(ref)}'; `rtforge runs` lists the stored runs")
        shown = ", ".join(f"{r.run_id}" + (f" ({clean(r.label)})" if r.label else "") for r in matches[:5])
        more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
        raise UserError(f"'{clean(ref)}' names {len(matches)} runs: {shown}{more}; give the id, or more of it")

    def relabel(self, run_id: str, label: str | None) -> RunResult:
        """Give a stored run a new label (None: none); the index follows."""
        result = self.load(run_id)
        result.label = label
        self.save(result)
        return result

    def remove(self, run_id: str) -> None:
        """Delete a stored run: its folder leaves the store in one rename
        (a reader sees it whole or not at all), then its files go."""
        d = self.run_dir(run_id)
        trash = self.runs_dir / f".deleted-{run_id}-{secrets.token_hex(4)}"
        try:
            os.rename(d, trash)
        except FileNotFoundError:
            raise UserError(f"run {run_id} not found in {self.root}; `rtforge runs` lists the stored runs") from None
        except OSError as e:
            raise UserError(paths.os_error_sentence(d, e, "delete the run")) from None
        sync_dir(self.runs_dir)
        try:
            with self._index() as db:
                db.execute("DELETE FROM runs WHERE run_id = ?", _sql((run_id,)))
                db.execute("DELETE FROM damaged WHERE folder = ?", _sql((run_id,)))
        except UserError as e:
            log.warning("%s; the index forgets the run at the next listing", e)
        if trash.is_symlink() or not trash.is_dir():
            trash.unlink()
        else:
            shutil.rmtree(trash, ignore_errors=True)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _memory() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    _create(db)
    return db


def _create(db: sqlite3.Connection) -> None:
    cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "run_id" else c for c in COLUMNS)
    db.execute("DROP TABLE IF EXISTS runs")
    db.execute("DROP TABLE IF EXISTS damaged")
    db.execute(f"CREATE TABLE runs ({cols}, file_key TEXT)")
    db.execute("CREATE INDEX runs_sha ON runs (source_sha256)")
    db.execute("CREATE TABLE damaged (folder TEXT PRIMARY KEY, path TEXT, why TEXT, file_key TEXT, "
               "source_sha256 TEXT)")
    db.execute(f"PRAGMA user_version = {INDEX_VERSION}")
    db.commit()


def _read_only(e: sqlite3.OperationalError) -> bool:
    """The index cannot be written here (a read-only or full disk): index in memory."""
    text = str(e)
    return any(w in text for w in ("readonly", "read-only", "unable to open", "disk is full", "disk I/O error"))
