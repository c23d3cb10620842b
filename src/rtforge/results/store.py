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

A run is saved with state "running" (and its owner) before it starts; the
store itself never decides whether that owner lives, and starts no process
and sends no signal: settling a run whose owner died is the lifecycle's
(measure/lifecycle.py), done explicitly by the commands that show runs.

The store opens only its own files: runs.db is never followed through a
symbolic link, must be a regular file, and a database that is not an
rtforge index (another application's) is never altered -- the index is
then kept in memory and a warning says what to do.  Writers (an import, a
run ending, a fetch, a relabel) take the store's lock (``writing``), so two
imports of one file cannot both succeed.

`last` is the run stored last (``stored_at``, set when a run is first
saved), not the one that started last: an import of an old file is last
right after it is imported.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import logging
import os
import re
import secrets
import shutil
import sqlite3
import stat
import tempfile
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from .. import paths
from ..errors import UserError
from ..paths import open_existing, sync_dir
from .display import clean
from .index import (
    _INSERT,
    _ORDER,
    COLUMNS,
    INDEX_VERSION,
    DamagedRun,
    IndexRow,
    _create,
    _lstat,
    _memory,
    _ours,
    _read_only,
    _row,
    _sql,
)
from .model import RunResult
from .runfolder import damaged_source, file_key, read_result
from .schema import RUN_ID_RE, Damaged

log = logging.getLogger("rtforge")

class Store:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root else paths.data_dir()
        self.runs_dir = self.root / "runs"
        self.db_path = self.root / "runs.db"
        self._warned: set[str] = set()
        self._held = 0   # writing() is re-entrant within this process

    def _check_missing_root(self) -> None:
        """A store that is not there is empty -- unless the path cannot be a
        folder at all (a file, a loop of symbolic links, a file among its parents):
        then "no runs yet" would hide the mistake."""
        try:
            os.stat(self.root)
        except FileNotFoundError:
            if self.root.is_symlink():
                raise UserError(f"the run store {self.root} is a symbolic link to nothing: give --results-dir a "
                                "folder") from None
            return
        except OSError as e:
            known = {errno.ELOOP: "a loop of symbolic links", errno.ENOTDIR: "below a file, not a folder"}
            why = known.get(e.errno or 0, e.strerror or str(e))
            raise UserError(f"the run store {self.root} cannot be a folder ({why}): give --results-dir a folder, "
                            "or fix RTFORGE_RESULTS_DIR / XDG_DATA_HOME") from None
        raise UserError(f"the run store {self.root} is not a folder: give --results-dir a folder")

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)

    @contextmanager
    def writing(self):
        """The store's writers' lock (an exclusive flock on <root>/.lock):
        imports, runs ending, fetches and relabels change the store one at a
        time, so a check-then-write (is this file imported?) cannot race."""
        if self._held:
            self._held += 1
            try:
                yield
            finally:
                self._held -= 1
            return
        self._writable_root()
        lock = self.root / ".lock"
        try:
            fd = open_existing(lock, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            why = ("is a symbolic link" if e.errno == errno.ELOOP else "is not a regular file"
                   if e.errno == errno.EINVAL else f"cannot be opened ({e.strerror})")
            raise UserError(f"the run store's lock {lock} {why}: remove it and try again") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._held = 1
            yield
        finally:
            self._held = 0
            os.close(fd)

    # -- run folders -------------------------------------------------------
    def save(self, result: RunResult) -> Path:
        """Write result.json atomically (synced, renamed), then index it."""
        with self.writing():
            return self._save_unlocked(result)

    def add(self, result: RunResult, staging: Path) -> Path:
        """Make a staging folder the run folder of result (see _add_unlocked)."""
        with self.writing():
            return self._add_unlocked(result, staging)

    def relabel(self, run_id: str, label: str | None) -> RunResult:
        """Give a stored run a new label (None: none); the index follows."""
        with self.writing():
            return self._relabel_unlocked(run_id, label)

    def remove(self, run_id: str) -> None:
        """Delete a stored run (see _remove_unlocked)."""
        with self.writing():
            self._remove_unlocked(run_id)

    def new_run_id(self, host: str, when: datetime | None = None) -> str:
        """<date>-<time>-<host>-<4 hex digits>; an import names its file
        instead of a host, so imports made in one second differ early."""
        when = when or datetime.now(UTC)
        safe_host = re.sub(r"[^A-Za-z0-9.-]+", "_", host)[:32].strip("._") or "host"
        return f"{when:%Y%m%d-%H%M%S}-{safe_host}-{secrets.token_hex(2)}"

    def run_dir(self, run_id: str) -> Path:
        """runs/<run_id>; UserError for an id that could name another place."""
        if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
            raise UserError(f"'{run_id}' is not a run id (letters, digits, '.', '_', '+', '-'); "
                            "`rtforge runs` lists the stored runs")
        return self.runs_dir / run_id

    def check_writable(self) -> None:
        """UserError now when the store could not be written, made nothing: a
        command that will store a run asks before it starts the run."""
        if not self.root.is_dir():
            self._check_missing_root()   # a file, a loop, a dangling link: said; a missing store: made later
        if os.path.lexists(self.runs_dir) and not self.runs_dir.is_dir():
            raise UserError(f"the run store {self.runs_dir} is not a folder: give --results-dir a folder")
        there = self.root
        while not os.path.lexists(there) and there != there.parent:
            there = there.parent
        if not os.access(there, os.W_OK | os.X_OK):
            raise UserError(f"the run store {self.root} cannot be written ({there} is not writable here): give "
                            "--results-dir a folder you may write")

    def _writable_root(self) -> None:
        """The store's folders, made if needed; UserError when they cannot be."""
        for d in (self.root, self.runs_dir):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise UserError(f"the run store {d} is not a folder: give --results-dir a folder") from None
            except OSError as e:
                raise UserError(paths.os_error_sentence(d, e, "create the run store")) from None

    def _save_unlocked(self, result: RunResult) -> Path:
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

    def _add_unlocked(self, result: RunResult, staging: Path) -> Path:
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
            return read_result(d)
        except Damaged as e:
            raise UserError(f"run {run_id} is damaged: {d / 'result.json'}: {e}; "
                            "repair or delete that folder, or import the run again") from None

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
            self._check_missing_root()
            return _memory()  # nothing stored yet; reading must not create the store
        before = _lstat(self.db_path)
        if before is not None and not stat.S_ISREG(before.st_mode):
            self._warn_once(f"the run index {self.db_path} is not a regular file (a symbolic link or a folder): "
                            "rtforge does not follow it or write through it; the index is kept in memory -- "
                            "remove it to have it rebuilt")
            return _memory()
        if before is not None and not _ours(self.db_path):
            self._warn_once(f"{self.db_path} is not an rtforge index (another program's database?): rtforge leaves "
                            "it as it is and keeps the index in memory; move it out of the store to have the index "
                            "rebuilt")
            return _memory()
        try:
            db = sqlite3.connect(self.db_path, timeout=30)
        except sqlite3.Error:
            return _memory()  # cannot even open it (a read-only folder without runs.db)
        after = _lstat(self.db_path)
        if after is None or not stat.S_ISREG(after.st_mode) or \
                (before is not None and (before.st_dev, before.st_ino) != (after.st_dev, after.st_ino)):
            db.close()  # swapped for something else while being opened: not ours to write
            return _memory()
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
            reason: sqlite3.Error = e
        except sqlite3.DatabaseError as e:
            reason = e
        db.close()
        log.warning("the run index %s is unreadable (%s): rebuilding it from the run folders", self.db_path, reason)
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                if (st := _lstat(Path(f"{self.db_path}{suffix}"))) is not None and stat.S_ISREG(st.st_mode):
                    Path(f"{self.db_path}{suffix}").unlink()
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
        """All readable runs, in the order they were stored."""
        with self._index() as db:
            rows = db.execute(f"SELECT {','.join(COLUMNS)} FROM runs {_ORDER}").fetchall()
        return [IndexRow(*r) for r in rows]

    def damaged(self) -> builtins.list[DamagedRun]:  # typing's List: `list` is a method of this class
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

    def _relabel_unlocked(self, run_id: str, label: str | None) -> RunResult:
        """Give a stored run a new label (None: none); the index follows."""
        result = self.load(run_id)
        result.label = label
        self._save_unlocked(result)
        return result

    def _remove_unlocked(self, run_id: str) -> None:
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
    return datetime.now(UTC).isoformat(timespec="microseconds")


