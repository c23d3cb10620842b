"""The run store: one folder per run, and an SQLite index of them.

    <root>/runs/<run-id>/result.json   the run (results.model), the truth
    <root>/runs/<run-id>/raw/          what the engine wrote, untouched
    <root>/runs.db                     index for listing, nothing more

The index heals itself: it is rebuilt from the run folders when it is
missing, of another schema version or unreadable (truncated, garbage; with
a warning); an index of the previous version is upgraded in place.  Lookups
(import, show, label, delete) answer from the index alone: one stat of
runs/ tells them whether folders were added or removed since, and only then
is runs/ listed and the new folders read (indexsync.py).  A listing
(`list`, `check`: `rtforge runs`) compares every folder's result.json with
the index (one stat per run), so runs changed in place by hand are noticed
there.  A folder whose
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
imports of one file cannot both succeed.  Their scratch (an import being
built, a run being deleted) is runs/.tmp/, so it never changes runs/.

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
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ... import paths
from ...errors import UserError
from ...paths import open_existing, sync_dir
from ..display import clean
from ..model import RunResult
from ..schema import RUN_ID_RE, Damaged
from .indexdb import _INSERT, _ORDER, COLUMNS, ORDER_KEY, DamagedRun, IndexRow, _sql, insert_values
from .indexsync import RunIndex, stamp
from .runfolder import file_key, read_result
from .runquery import RunQuery

log = logging.getLogger("rtforge")

class Store:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root else paths.data_dir()
        self.runs_dir = self.root / "runs"
        self.db_path = self.root / "runs.db"
        self.scratch = self.runs_dir / ".tmp"
        self._warned: set[str] = set()
        self._held = 0   # writing() is re-entrant within this process
        self._index = RunIndex(self).connect

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
        before = stamp(self.runs_dir)   # the index was current then: the change below is this writer's
        try:
            d.mkdir(exist_ok=True)
        except OSError as e:
            raise UserError(paths.os_error_sentence(d, e, "create the run folder")) from None
        if d.is_symlink() or not d.is_dir():
            raise UserError(f"{d} is not a run folder (a symbolic link or a file); move it out of the store")
        if result.stored_at is None:
            result.stored_at = self._stored_at(result.run_id) or _now()
        paths.write_atomic(d / "result.json", result.to_json(), fixed_tmp=True)
        self._index_run(result, d, before, "saved")
        return d

    def staging(self) -> Path:
        """A new folder in the store's scratch to build a run in (see add)."""
        self._writable_root()
        try:
            return Path(tempfile.mkdtemp(dir=self._scratch("write into the run store"), prefix="import-"))
        except OSError as e:
            raise UserError(paths.os_error_sentence(self.runs_dir, e, "write into the run store")) from None

    def _scratch(self, doing: str) -> Path:
        """runs/.tmp, made if needed: a folder of the store's own, never
        followed through a symbolic link out of the store."""
        try:
            self.scratch.mkdir(exist_ok=True)
        except FileExistsError:
            pass   # a file or a link where the scratch belongs: said below
        except OSError as e:
            raise UserError(paths.os_error_sentence(self.scratch, e, doing)) from None
        if self.scratch.is_symlink() or not self.scratch.is_dir():
            raise UserError(f"{self.scratch} is not a folder of the store (a symbolic link or a file): remove it "
                            "and try again")
        return self.scratch

    def _add_unlocked(self, result: RunResult, staging: Path) -> Path:
        """Make a staging folder (raw files inside) the run folder of result:
        result.json is written into it, then the folder is renamed into place,
        so a run appears whole or not at all.  The run id changes if taken."""
        result.stored_at = _now()
        before = stamp(self.runs_dir)
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
        self._index_run(result, d, before, "stored")
        return d

    def _index_run(self, result: RunResult, d: Path, before, done: str) -> None:
        """The index's row for a run whose folder is written: an index that
        cannot be written is not the run's loss (the folders are the truth)."""
        try:
            with self._index(before=before) as db:
                db.execute(_INSERT, insert_values(result, file_key(d)))
        except UserError as e:
            log.warning("%s; the run is %s and the index is rebuilt from the run folders later", e, done)

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
    def reindex(self) -> int:
        """Rebuild the index from the run folders (one read at a time); the number of readable runs."""
        with self._index() as db:
            db.execute("DELETE FROM runs")
            db.execute("DELETE FROM damaged")
            RunIndex(self).catch_up(db, verify=True)
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def check(self) -> None:
        """Compare every run folder's result.json with the index (a stat
        each): what was edited, damaged or repaired in place is read again."""
        with self._index(verify=True):
            pass

    def all_rows(self) -> list[IndexRow]:
        """All readable runs, in the order they were stored, every folder checked first."""
        with self._index(verify=True) as db:
            rows = db.execute(f"SELECT {','.join(COLUMNS)} FROM runs {_ORDER}").fetchall()
        return [IndexRow(*r) for r in rows]

    def count(self, query: RunQuery | None = None) -> int:
        where, params = (query or RunQuery()).where()
        with self._index() as db:
            return db.execute(f"SELECT COUNT(*) FROM runs {where}", params).fetchone()[0]

    def rows(self, query: RunQuery | None = None, newest: int | None = None, page: int = 500) -> Iterator[IndexRow]:
        """The runs query keeps (newest: only the newest that many), in the
        order they were stored, read a page at a time: no read of the index
        stays open while the caller writes them out (a reader holding one
        would keep an import waiting), and no list of every row is made."""
        where, params = (query or RunQuery()).where()
        joined = "AND" if where else "WHERE"
        with self._index() as db:
            bound, op = None, ">="
            if newest is not None:   # the oldest of the newest N; none: there are fewer, all are shown
                bound = db.execute(f"SELECT {ORDER_KEY}, run_id FROM runs {where} ORDER BY {ORDER_KEY} DESC, "
                                   "run_id DESC LIMIT 1 OFFSET ?", (*params, max(newest - 1, 0))).fetchone()
            while True:
                cond, args = (f"{where} {joined} ({ORDER_KEY}, run_id) {op} (?, ?)", (*params, *bound)) \
                    if bound else (where, params)
                got = db.execute(f"SELECT {','.join(COLUMNS)}, {ORDER_KEY} FROM runs {cond} {_ORDER} LIMIT ?",
                                 (*args, page)).fetchall()
                yield from (IndexRow(*r[:-1]) for r in got)
                if len(got) < page:
                    return
                bound, op = (got[-1][-1], got[-1][0]), ">"

    def running(self) -> builtins.list[IndexRow]:
        """The runs stored as running (for the lifecycle to settle)."""
        with self._index() as db:
            rows = db.execute(f"SELECT {','.join(COLUMNS)} FROM runs WHERE state = 'running' {_ORDER}").fetchall()
        return [IndexRow(*r) for r in rows]

    def labelled(self, label: str) -> builtins.list[str]:
        """The ids of the runs carrying this label."""
        with self._index() as db:
            return [r[0] for r in db.execute(f"SELECT run_id FROM runs WHERE label = ? {_ORDER}", _sql((label,)))]

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
        (key,) = _sql((ref,))
        # a prefix as a range of the primary key: every id that starts with it sorts from it to it + the last code point
        named = "(? <> '' AND (label = ? OR (run_id >= ? AND run_id < ?)))"
        with self._index() as db:
            if db.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is None:
                raise UserError(f"no runs stored in {self.root}; measure one with `rtforge latency`")
            if ref == "last":
                last = f"SELECT run_id FROM runs ORDER BY {ORDER_KEY} DESC, run_id DESC LIMIT 1"
                return db.execute(last).fetchone()[0]
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (key,)).fetchone():
                return ref
            args = (key, key, key, key + "\U0010ffff")
            count = db.execute(f"SELECT COUNT(*) FROM runs WHERE {named}", args).fetchone()[0]
            matches = db.execute(f"SELECT run_id, label FROM runs WHERE {named} {_ORDER} LIMIT 5", args).fetchall()
            broken = [] if count else db.execute(
                "SELECT folder, path, why FROM damaged WHERE ? <> '' AND (folder = ? OR (folder >= ? AND folder < ?)) "
                "LIMIT 2", args).fetchall()
        if count == 1:
            return matches[0][0]
        if not count:
            if len(broken) == 1:
                folder, path, why = broken[0]
                raise UserError(f"run {folder} is damaged: {path}: {why}; "
                                "repair or delete that folder, or import the run again")
            raise UserError(f"no run has the id or label '{clean(ref)}'; `rtforge runs` lists the stored runs")
        shown = ", ".join(f"{run_id}" + (f" ({clean(label)})" if label else "") for run_id, label in matches)
        more = f" and {count - 5} more" if count > 5 else ""
        raise UserError(f"'{clean(ref)}' names {count} runs: {shown}{more}; give the id, or more of it")

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
        trash = self._scratch("delete the run") / f"deleted-{run_id}-{secrets.token_hex(4)}"
        before = stamp(self.runs_dir)
        try:
            os.rename(d, trash)
        except FileNotFoundError:
            raise UserError(f"run {run_id} not found in {self.root}; `rtforge runs` lists the stored runs") from None
        except OSError as e:
            raise UserError(paths.os_error_sentence(d, e, "delete the run")) from None
        sync_dir(self.runs_dir)
        try:
            with self._index(before=before) as db:
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


