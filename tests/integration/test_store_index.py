"""The run store's index answers alone (issue 34): a lookup -- import,
show, label, delete -- looks at the run it names and at no other folder,
yet folders added or removed by hand are still seen; an index written by
the previous version (3) is upgraded in place, once, nothing lost."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.importers import import_file
from rtforge.results.store.indexdb import COLUMNS, _row
from rtforge.results.store.runfolder import file_key, read_result
from rtforge.results.store.runquery import RunQuery, since_utc
from rtforge.results.store.runstore import Store

from ..support.runs import copies

GOLDEN = Path(__file__).parents[1] / "golden" / "cyclictest"


class Touched:
    """The run folders a command stats or opens, by name: os.stat, os.lstat
    and os.open are how rtforge looks at any file (pathlib goes through them)."""

    def __init__(self, mp: pytest.MonkeyPatch, runs_dir: Path):
        self.runs_dir = str(runs_dir)
        self.names: set[str] = set()
        for name in ("stat", "lstat", "open"):
            mp.setattr(os, name, self._spy(getattr(os, name)))

    def _spy(self, real):
        def spy(path, *args, **kw):
            if not isinstance(path, int):
                rel = os.path.relpath(os.fsdecode(os.fspath(path)), self.runs_dir)
                first = rel.split(os.sep)[0]
                if first not in ("..", ".", ".tmp"):
                    self.names.add(first)
            return real(path, *args, **kw)
        return spy


def test_a_lookup_looks_at_the_run_it_names_and_no_other(tmp_path, capsys):
    store = Store(tmp_path / "results")
    rd = ["--results-dir", str(store.root)]
    template = import_file(GOLDEN / "hist.txt", store)
    others = copies(store, template.run_id, 30)
    assert main(["runs", *rd]) == 0          # the listing compares every folder, once
    capsys.readouterr()

    def touched(argv: list[str], status: int = 0) -> tuple[set[str], str]:
        with pytest.MonkeyPatch.context() as mp:
            spy = Touched(mp, store.runs_dir)
            got = main([*argv, *rd])
        out, err = capsys.readouterr()
        assert got == status, err
        return spy.names, out + err

    names, out = touched(["import", str(GOLDEN / "run.json"), "--json", "--label", "new"])
    new = json.loads(out)["run_id"]
    assert names <= {new}
    for argv in (["show", new], ["show", "last"], ["show", "new"], ["label", new, "fresh"], ["show", "fresh"],
                 ["delete", "fresh", "--yes"]):
        names, _ = touched(argv)
        assert names <= {new}, (argv, sorted(names)[:5])
    names, out = touched(["import", str(GOLDEN / "hist.txt")], status=2)   # a repeat, found by the index
    assert "already imported" in out and names == set()

    # by hand: a folder copied in is found, one removed is gone -- each without a listing
    hand = "20260301-120000-by-hand-0001"
    shutil.copytree(store.run_dir(others[0]), store.runs_dir / hand)
    doc = json.loads((store.runs_dir / hand / "result.json").read_text())
    (store.runs_dir / hand / "result.json").write_text(json.dumps({**doc, "run_id": hand, "label": "by hand"}))
    names, out = touched(["show", "by hand"])
    assert hand in out and names == {hand}
    shutil.rmtree(store.run_dir(others[1]))
    names, out = touched(["show", others[1]], status=2)
    assert "no run has the id or label" in out and out.count("\n") == 1 and names == set()


# runs.db as rtforge wrote it with index version 3 (before commit "store: lookups by the index alone")
V3_TABLES = [
    "CREATE TABLE runs ({cols}, file_key TEXT)",
    "CREATE INDEX runs_sha ON runs (source_sha256)",
    "CREATE TABLE damaged (folder TEXT PRIMARY KEY, path TEXT, why TEXT, file_key TEXT, source_sha256 TEXT)",
    "PRAGMA user_version = 3",
    "PRAGMA application_id = 1920231015",
]


def write_v3_index(store: Store, damaged: dict[str, str]) -> None:
    """Every readable folder's row and the damaged folders' rows, as version 3 stored them."""
    db = sqlite3.connect(store.db_path)
    cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "run_id" else c for c in COLUMNS)
    for sql in V3_TABLES:
        db.execute(sql.format(cols=cols))
    for folder in sorted(store.runs_dir.iterdir()):
        if folder.name in damaged:
            db.execute("INSERT INTO damaged VALUES (?,?,?,?,?)",
                       (folder.name, str(folder / "result.json"), damaged[folder.name], file_key(folder), None))
        elif not folder.name.startswith("."):
            db.execute(f"INSERT INTO runs VALUES ({','.join('?' * (len(COLUMNS) + 1))})",
                       (*_row(read_result(folder)), file_key(folder)))
    db.commit()
    db.close()


def test_an_index_of_version_3_is_upgraded_once_and_nothing_is_lost(tmp_path, capsys):
    store = Store(tmp_path / "results")
    rd = ["--results-dir", str(store.root)]
    runs = {name: import_file(GOLDEN / name, store, label=label).run_id
            for name, label in (("hist.txt", "stock"), ("run.json", "rt"), ("summary.txt", None))}
    [broken] = copies(store, runs["summary.txt"], 1)
    (store.run_dir(broken) / "result.json").write_text("[]")
    store.db_path.unlink()
    write_v3_index(store, {broken: "result.json is list, not an object"})
    # changed after the last rtforge of version 3 looked: the first open after the upgrade compares every folder
    edited = store.run_dir(runs["summary.txt"]) / "result.json"
    edited.write_text(json.dumps({**json.loads(edited.read_text()), "label": "edited by hand"}))

    def cli(*argv: str) -> tuple[int, str, str]:
        status = main([*argv, *rd])
        out, err = capsys.readouterr()
        return status, out, err

    status, out, _ = cli("show", "stock")
    assert status == 0 and runs["hist.txt"] in out
    with sqlite3.connect(store.db_path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    status, out, err = cli("runs", "--json")
    assert status == 0 and sorted(r["run_id"] for r in json.loads(out)) == sorted(runs.values())
    assert f"run folder {broken} is damaged" in err
    for ref, run_id in (("rt", runs["run.json"]), ("edited by hand", runs["summary.txt"]),
                        ("last", runs["summary.txt"])):
        status, out, err = cli("show", ref, "--json")
        assert status == 0 and json.loads(out)["run_id"] == run_id, (ref, err)
    # the start times the upgrade added answer `runs --since`
    assert [store.count(RunQuery(since=since_utc(day))) for day in ("2000-01-01", "2100-01-01")] == [3, 0]
    status, _, err = cli("import", str(GOLDEN / "summary.txt"))
    assert status == 2 and "already imported" in err
    # once: lookups and listings now find the index current and write nothing to it
    before = store.db_path.read_bytes()
    assert [cli(*argv)[0] for argv in (["show", "stock"], ["show", "last"], ["runs"], ["runs", "--json"])] == [0] * 4
    assert store.db_path.read_bytes() == before
