"""The run store's index file: opened (or refused, or rebuilt) and kept in
step with the run folders -- without reading every folder each time.

Scanning runs/ costs a stat per run; at thousands of runs that is most of
an import, and an import per run made filling a store quadratic.  So the
index keeps a stamp of the runs/ folder itself (device, inode, mtime,
ctime, link count: what changes when an entry is added, removed or renamed
in it) in its meta table, and an open compares one stat with it:

- the same stamp: the index has every folder, no folder is read;
- another stamp: runs/ is listed once (names only) and the folders that
  are new are read, the gone forgotten;
- no stamp (a new or upgraded index), or ``verify``: every folder's
  result.json is stat'ed and compared (file_key), so a result changed in
  place -- edited by hand, damaged -- is read again.  `rtforge runs` asks
  for this; lookups (import, show, label, delete) do not.

A writer holding the store's lock takes the stamp just before its own
change (``before``): if the index was current then, the change is its
own, it records its rows, and the new stamp is kept without a scan.  What
is changed by hand meanwhile is seen by the next listing.

A folder still being written (no result.json yet) is left for later, and
the stamp is not kept, so the next open looks again.  A rebuild streams:
one folder read and indexed at a time.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import UserError
from ..schema import RUN_ID_RE, Damaged
from .indexdb import _INSERT, INDEX_VERSION, _create, _lstat, _memory, _ours, _read_only, _sql, _upgrade, insert_values
from .runfolder import damaged_source, file_key, read_result

if TYPE_CHECKING:
    from .runstore import Store

log = logging.getLogger("rtforge")


def stamp(runs_dir: Path) -> str | None:
    """What changes whenever an entry of runs/ is added, removed or renamed
    (the link count too, for a change within the mtime's tick); None without runs/."""
    try:
        st = os.stat(runs_dir)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_nlink}"


def _check_whole(db: sqlite3.Connection, db_path: Path, check: bool) -> None:
    """Raise sqlite3.DatabaseError unless the index file is as long as its header
    says and has its tables; check: every page too (quick_check reads the whole file)."""
    pages = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    if (size := os.path.getsize(db_path)) < pages:   # cut off: pages the header counts are missing
        raise sqlite3.DatabaseError(f"cut off: {size:,} of {pages:,} bytes")
    if check and (problem := db.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
        raise sqlite3.DatabaseError(problem)
    for table in ("runs", "damaged", "meta"):
        db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone()   # there, its first page readable


class RunIndex:
    """runs.db of one store (see the module's docstring and runstore.py's)."""

    def __init__(self, store: Store):
        self.store = store

    @contextmanager
    def connect(self, *, verify: bool = False, before: str | None = None) -> Iterator[sqlite3.Connection]:
        """The index, in step with the run folders (see catch_up)."""
        db = self.open(check=verify)
        try:
            try:
                self.catch_up(db, verify=verify, before=before)
                db.commit()
            except sqlite3.OperationalError as e:
                if not _read_only(e):
                    raise
                db.close()  # a read-only store: index it in memory
                db = _memory()
                self.catch_up(db, verify=True)
            yield db
            db.commit()
        except sqlite3.OperationalError as e:
            if "locked" in str(e):
                raise UserError(f"the run store's index {self.store.db_path} stayed locked by another rtforge for "
                                "30 s; try again when it is done") from None
            raise UserError(f"cannot use the run store's index {self.store.db_path} ({e}): check the folder, "
                            "or delete runs.db to have it rebuilt") from None
        except sqlite3.DatabaseError as e:
            if type(e) is not sqlite3.DatabaseError:   # "malformed", "not a database": not a constraint's error
                raise
            # damage a lookup met in a page the open did not read (only a listing reads them all): the
            # index is ours (open checked), so it goes, and the next command builds it again
            db.close()
            self._remove()
            raise UserError(f"the run store's index {self.store.db_path} is damaged ({e}): it was removed and is "
                            "rebuilt from the run folders by the next command; run this one again") from None
        finally:
            db.close()

    def catch_up(self, db: sqlite3.Connection, *, verify: bool = False, before: str | None = None) -> None:
        """Index what changed in runs/ since the stamp the index keeps."""
        row = db.execute("SELECT value FROM meta WHERE key = 'runs'").fetchone()
        kept = row[0] if row else None
        now = stamp(self.store.runs_dir)
        if not verify and kept is not None and kept in (now, before):
            if kept != now:   # the caller's own change (lock held): it records its rows in this transaction
                db.execute("INSERT OR REPLACE INTO meta VALUES ('runs', ?)", (now,))
            return
        # taken before the listing: a change made while listing leaves another stamp, seen next time
        settled = self._scan(db, every=verify or kept is None)
        keep = now if settled else ""   # "": no stamp to trust, runs/ is listed again (by name) next time
        if keep != kept:   # nothing written when nothing changed: a write is a commit, a sync of the disk
            db.execute("INSERT OR REPLACE INTO meta VALUES ('runs', ?)", (keep,))

    def _scan(self, db: sqlite3.Connection, every: bool) -> bool:
        """List runs/: index the folders that are new (every: or whose
        result.json changed), forget the gone.  False when a folder was
        still being written."""
        runs_dir = self.store.runs_dir
        if every:
            indexed = dict(db.execute("SELECT run_id, file_key FROM runs UNION ALL "
                                      "SELECT folder, file_key FROM damaged"))
        else:
            indexed = dict.fromkeys(r[0] for r in db.execute("SELECT run_id FROM runs UNION ALL "
                                                             "SELECT folder FROM damaged"))
        seen: set[str] = set()
        settled = True
        if runs_dir.is_dir():
            with os.scandir(runs_dir) as it:
                for entry in it:
                    if entry.name.startswith("."):
                        continue  # the store's scratch (.tmp) and older rtforges' temporary folders
                    # the index holds names as SQLite can (a name that is not UTF-8: with U+FFFD)
                    db_name = entry.name if entry.name.isascii() else _sql((entry.name,))[0]
                    if not every and db_name in indexed:
                        seen.add(db_name)
                        continue
                    key = file_key(entry)
                    if key is None:
                        settled = False   # being written: looked at again at the next open
                        continue
                    seen.add(db_name)
                    if db_name not in indexed or indexed[db_name] != key:
                        self.index_folder(db, entry.name, key)
        for gone in indexed.keys() - seen:
            db.execute("DELETE FROM runs WHERE run_id = ?", (gone,))
            db.execute("DELETE FROM damaged WHERE folder = ?", (gone,))
        return settled

    def index_folder(self, db: sqlite3.Connection, name: str, key: str) -> None:
        db.execute("DELETE FROM runs WHERE run_id = ?", _sql((name,)))
        db.execute("DELETE FROM damaged WHERE folder = ?", _sql((name,)))
        folder = self.store.runs_dir / name
        try:
            if folder.is_symlink() or not folder.is_dir():
                raise Damaged("it is not a folder but a symbolic link or a file")
            if not RUN_ID_RE.fullmatch(name):
                raise Damaged("its name is not a run id")
            result = read_result(folder)
            db.execute(_INSERT, insert_values(result, key))
        except Damaged as e:
            where = str(folder / "result.json") if folder.is_dir() and not folder.is_symlink() else str(folder)
            db.execute("INSERT OR REPLACE INTO damaged VALUES (?,?,?,?,?)",
                       _sql((name, where, str(e), key, damaged_source(folder))))

    def open(self, check: bool = False) -> sqlite3.Connection:
        """runs.db, ours and readable (upgraded from version 3, rebuilt when
        damaged or of another version); in memory when it cannot be used.
        Each open checks that the file is whole (as long as its header says)
        and has its tables; check: every page too (quick_check, which reads
        the whole file: a listing's cost, not a lookup's)."""
        store, db_path = self.store, self.store.db_path
        if not store.root.is_dir():
            store._check_missing_root()
            return _memory()  # nothing stored yet; reading must not create the store
        before = _lstat(db_path)
        if self._foreign(before):
            return _memory()
        try:
            db = sqlite3.connect(db_path, timeout=30)
        except sqlite3.Error:
            return _memory()  # cannot even open it (a read-only folder without runs.db)
        after = _lstat(db_path)
        if after is None or not stat.S_ISREG(after.st_mode) or \
                (before is not None and (before.st_dev, before.st_ino) != (after.st_dev, after.st_ino)):
            db.close()  # swapped for something else while being opened: not ours to write
            return _memory()
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version != INDEX_VERSION and not (version == 3 and _upgrade(db)):
                _create(db)
                return db
            _check_whole(db, db_path, check)
            return db
        except sqlite3.OperationalError as e:
            if "locked" in str(e):
                db.close()
                raise UserError(f"the run store's index {db_path} stayed locked by another rtforge for 30 s; "
                                "try again when it is done") from None
            if _read_only(e):
                db.close()
                return _memory()
            reason: sqlite3.Error = e
        except sqlite3.DatabaseError as e:
            reason = e
        db.close()
        log.warning("the run index %s is unreadable (%s): rebuilding it from the run folders", db_path, reason)
        return self._anew()

    def _foreign(self, before: os.stat_result | None) -> bool:
        """Whether runs.db is there but not rtforge's to open -- not a regular file, or
        another program's database -- said once; the index is then kept in memory."""
        db_path = self.store.db_path
        if before is not None and not stat.S_ISREG(before.st_mode):
            self.store._warn_once(f"the run index {db_path} is not a regular file (a symbolic link or a folder): "
                                  "rtforge does not follow it or write through it; the index is kept in memory -- "
                                  "remove it to have it rebuilt")
            return True
        if before is not None and not _ours(db_path):
            self.store._warn_once(f"{db_path} is not an rtforge index (another program's database?): rtforge "
                                  "leaves it as it is and keeps the index in memory; move it out of the store to "
                                  "have the index rebuilt")
            return True
        return False

    def _remove(self) -> bool:
        """runs.db and its journal files gone (regular files only); False when one could not be removed."""
        db_path = self.store.db_path
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                if (st := _lstat(Path(f"{db_path}{suffix}"))) is not None and stat.S_ISREG(st.st_mode):
                    Path(f"{db_path}{suffix}").unlink()
            except OSError:
                return False
        return True

    def _anew(self) -> sqlite3.Connection:
        """A new, empty runs.db where a damaged one was (its journal files too)."""
        if not self._remove():
            return _memory()
        db_path = self.store.db_path
        try:
            db = sqlite3.connect(db_path, timeout=30)
            _create(db)
            return db
        except sqlite3.Error:
            return _memory()
