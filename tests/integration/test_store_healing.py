"""The store heals itself: runs.db is only an index, rebuilt from the run
folders when it is missing or unreadable; a damaged run folder is listed as
damaged (why, where) and never hides the others or lets a duplicate in; no
path read from a result leads out of the store; `last` is the run stored last."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.store.runstore import Store

GOLDEN = Path(__file__).parents[1] / "golden" / "cyclictest"
FILES = ["hist.txt", "run.json", "summary.txt"]


@pytest.fixture
def stocked(tmp_path, capsys):
    """A store with three imports; returns (results dir, {file name: run id})."""
    results = tmp_path / "results"
    ids = {}
    for name in FILES:
        assert main(["import", str(GOLDEN / name), "--results-dir", str(results), "--json"]) == 0
        ids[name] = json.loads(capsys.readouterr().out)["run_id"]
    return results, ids


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def listed(results: Path, capsys) -> list[str]:
    status, out, _ = run(["runs", "--results-dir", str(results), "--json"], capsys)
    assert status == 0
    return [r["run_id"] for r in json.loads(out)]


def _set(doc, path, value):
    *head, last = path
    for k in head:
        doc = doc[k]
    doc[last] = value


DAMAGES = {
    "empty list": lambda p: p.write_text("[]"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "empty file": lambda p: p.write_bytes(b""),
    "NaN bucket": lambda p: p.write_text(re.sub(r'"overflow": \d+', '"overflow": NaN', p.read_text(), count=1)),
    "negative bucket": lambda p: _edit(p, ["cpus", 0, "hist", "buckets", 0, 2], -5),
    "list as label": lambda p: _edit(p, ["label"], ["a", "b"]),
    "string count": lambda p: _edit(p, ["cpus", 0, "count"], "many"),
    "cpus an object": lambda p: _edit(p, ["cpus"], {"0": 1}),
    "loads a string": lambda p: _edit(p, ["config", "loads"], 5),
    "huge number": lambda p: p.write_text(re.sub(r'"overflow": \d+', '"overflow": ' + "9" * 5000, p.read_text(),
                                                 count=1)),
    "count beyond int64": lambda p: _edit(p, ["cpus", 0, "count"], 2**64),
    "deep nesting": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
    "not UTF-8": lambda p: p.write_bytes(b"\xff\xfe\x00garbage"),
    "newer format": lambda p: _edit(p, ["format_version"], 99),
    "a folder": lambda p: (p.unlink(), p.mkdir()),
    "a FIFO": lambda p: (p.unlink(), os.mkfifo(p)),
    "a link out": lambda p: (p.unlink(), p.symlink_to("/etc/hostname")),
}


def _edit(p: Path, path, value):
    doc = json.loads(p.read_text())
    _set(doc, path, value)
    p.write_text(json.dumps(doc))


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("reindex", [True, False], ids=["reindex", "listing"])
def test_a_damaged_run_is_listed_as_damaged_and_hides_nothing(stocked, capsys, damage, reindex):
    results, ids = stocked
    rd = ["--results-dir", str(results)]
    victim = ids["hist.txt"]
    DAMAGES[damage](results / "runs" / victim / "result.json")
    status, out, err = run(["runs", *rd] + (["--reindex"] if reindex else []), capsys)
    assert status == 0
    others = [ids["run.json"], ids["summary.txt"]]
    assert all(i in out for i in others)
    assert "damaged" in out and victim in out  # listed as damaged: which folder, why, where
    assert sorted(listed(results, capsys)) == sorted(others)
    for name in FILES:  # no duplicate import, the damaged run's file included
        status, _, err = run(["import", str(GOLDEN / name), *rd], capsys)
        assert status == 2 and "already imported" in err, (name, err)
    status, _, err = run(["show", victim, *rd], capsys)
    assert status == 2 and "damaged" in err and err.count("\n") == 1
    assert sorted(listed(results, capsys)) == sorted(others)  # nothing lost on the way
    if damage == "a link out":
        assert Path("/etc/hostname").read_text()  # still there, never written


@pytest.mark.parametrize("corrupt", ["garbage", "truncated", "empty", "no table"])
def test_an_unreadable_index_is_rebuilt_from_the_run_folders(stocked, capsys, corrupt):
    results, ids = stocked
    rd = ["--results-dir", str(results)]
    db = results / "runs.db"
    if corrupt == "garbage":
        db.write_bytes(os.urandom(5000))
    elif corrupt == "truncated":
        db.write_bytes(db.read_bytes()[:1500])
    elif corrupt == "empty":
        db.write_bytes(b"")
    else:
        with sqlite3.connect(db) as c:
            c.execute("DROP TABLE runs")
    status, out, err = run(["show", "last", *rd], capsys)
    assert status == 0 and ids["summary.txt"] in out
    if corrupt in ("garbage", "truncated", "no table"):
        assert "rtforge: warning: the run index" in err and "rebuilding it from the run folders" in err
    assert sorted(listed(results, capsys)) == sorted(ids.values())
    status, _, err = run(["import", str(GOLDEN / "hist.txt"), *rd], capsys)
    assert status == 2 and "already imported" in err
    assert run(["runs", "--reindex", *rd], capsys)[0] == 0


def test_a_run_id_that_leads_out_of_the_store_is_never_written(tmp_path, stocked, capsys):
    """A result whose run_id is ../../outside, left 'running' by a dead owner, was
    once finalized into <store>/runs/../../outside/result.json."""
    results, ids = stocked
    rd = ["--results-dir", str(results)]
    folder = results / "runs" / ids["hist.txt"]
    doc = json.loads((folder / "result.json").read_text())
    doc.update(run_id="../../outside", state="running", owner={"pid": 999_999_999, "start_ticks": 1})
    (folder / "result.json").write_text(json.dumps(doc))
    outside = tmp_path / "outside"
    for argv in (["runs"], ["runs", "--reindex"], ["show", "last"], ["report", "last", "-o", str(tmp_path / "r.html")]):
        status, out, err = run([*argv, *rd], capsys)
        assert status == 0, (argv, err)
    assert not outside.exists()
    status, out, _ = run(["runs", *rd], capsys)
    assert "is not a run id" in out
    for ref in ("../../outside", "../runs.db", "/etc/passwd"):
        status, _, err = run(["show", ref, *rd], capsys)
        assert status == 2 and err.count("\n") == 1
    assert not outside.exists()


@pytest.mark.slow
def test_last_is_the_run_stored_last_whatever_the_files_times(tmp_path, capsys):
    """Files with the same mtime, imported in an order unlike their run ids:
    `last` follows the store, for every command that takes a run."""
    rd = ["--results-dir", str(tmp_path / "results")]
    names = ["summary.txt", "hist.txt", "run-nohist.txt", "spike.txt", "nsecs.txt"]
    for name in names:
        shutil.copy(GOLDEN / name, tmp_path / name)
        os.utime(tmp_path / name, (1_700_000_000, 1_700_000_000))
    for name in names:
        status, out, _ = run(["import", str(tmp_path / name), *rd, "--json", "--label", name], capsys)
        assert status == 0
        imported = json.loads(out)["run_id"]
        status, out, _ = run(["show", "last", *rd, "--json"], capsys)
        assert json.loads(out)["run_id"] == imported and json.loads(out)["label"] == name
        status, out, _ = run(["compare", "last", *rd, "--json"], capsys)
        assert json.loads(out)[0]["run_id"] == imported
        status, out, _ = run(["report", "last", "-f", "md", "-o", str(tmp_path / "r.md"), *rd], capsys)
        assert status == 0 and f"| {name} |" in (tmp_path / "r.md").read_text()
    status, _, err = run(["plot", "last", "-o", str(tmp_path / "p.svg"), *rd], capsys)
    assert status == 2 and "every wake-up beyond its histogram's range" in err   # the -N run: no curve to draw
    assert run(["plot", "spike.txt", "-o", str(tmp_path / "p.svg"), *rd], capsys)[0] == 0  # a run named by label
    assert "spike.txt" in (tmp_path / "p.svg").read_text()
    (tmp_path / "results" / "runs.db").unlink()  # rebuilt from the folders: the order is kept
    status, out, _ = run(["show", "last", *rd, "--json"], capsys)
    assert json.loads(out)["label"] == names[-1]
    assert [r.label for r in Store(tmp_path / "results").all_rows()] == names


def test_results_dir_that_is_a_file_is_one_sentence(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    for argv in (["runs"], ["show", "last"], ["import", str(GOLDEN / "hist.txt")], ["report", "last"]):
        status, _, err = run([*argv, "--results-dir", str(f)], capsys)
        assert status == 2 and "is not a folder" in err and err.count("\n") == 1, (argv, err)
    assert f.read_text() == "x"


@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs of our own (root only): a read-only or full disk, for real."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.root
def test_a_read_only_store_is_still_read(tmpfs, tmp_path, capsys):
    results = tmpfs / "results"
    rd = ["--results-dir", str(results)]
    for name in FILES:
        assert main(["import", str(GOLDEN / name), *rd]) == 0
    capsys.readouterr()
    (results / "runs.db").unlink()  # and its index must be built without writing
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    assert len(listed(results, capsys)) == 3
    for argv in (["show", "last"], ["compare", "last"], ["report", "last", "-o", str(tmp_path / "r.html")]):
        status, _, err = run([*argv, *rd], capsys)
        assert status == 0, err
    status, _, err = run(["import", str(GOLDEN / "run-nsecs.json"), *rd], capsys)
    assert status == 2 and "read-only" in err and err.count("\n") == 1
    status, _, err = run(["report", "last", "-o", str(tmpfs / "r.html"), *rd], capsys)
    assert status == 2 and "read-only" in err and err.count("\n") == 1


@pytest.mark.root
def test_a_full_disk_leaves_no_half_run(tmpfs, tmp_path, capsys):
    results = tmpfs / "results"
    rd = ["--results-dir", str(results)]
    assert main(["import", str(GOLDEN / "summary.txt"), *rd]) == 0
    capsys.readouterr()
    big = tmp_path / "big.txt"  # a valid output larger than the disk
    lines = ["# Histogram"] + [f"{k:06d} {1 if k < 3 else 0:06d}" for k in range(200_000)]
    lines += ["# Total: 000000003", "# Min Latencies: 00000", "# Avg Latencies: 00001", "# Max Latencies: 00002",
              "# Histogram Overflows: 00000", "# Histogram Overflow at cycle number:", "# Thread 0:"]
    big.write_text("\n".join(lines) + "\n")
    status, _, err = run(["import", str(big), *rd], capsys)
    assert status == 2 and "disk is full" in err and err.count("\n") == 1
    assert sorted(os.listdir(results / "runs")) == sorted([".tmp", *listed(results, capsys)])
    assert os.listdir(results / "runs" / ".tmp") == []   # the scratch: no half import left
    assert len(listed(results, capsys)) == 1


@pytest.mark.slow
def test_file_size_limit_leaves_no_temp_files(tmp_path, rtforge_cmd):
    """ulimit -f: every write fails with EFBIG; report, plot and import say so in one line."""
    results = tmp_path / "results"
    subprocess.run([*rtforge_cmd, "import", str(GOLDEN / "hist.txt"), "--results-dir", str(results)], check=True,
                   capture_output=True)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    (tmp_path / "out").mkdir()

    def limited():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    for argv in (["report", "last", "-o", str(tmp_path / "out" / "r.html")],
                 ["report", "last", "-f", "md", "-o", str(tmp_path / "out" / "r.md")],
                 ["plot", "last", "-o", str(tmp_path / "out" / "p.png")],
                 ["import", str(GOLDEN / "run.json")]):
        p = subprocess.run([*rtforge_cmd, *argv, "--results-dir", str(results)], capture_output=True, text=True,
                           preexec_fn=limited, timeout=120)
        assert p.returncode == 2, (argv, p.stderr)
        assert "ulimit -f" in p.stderr and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
        assert list((tmp_path / "out").iterdir()) == []
    after = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.parent != tmp_path / "out"}
    assert {p for p in after if p != tmp_path / "out"} == set(before)  # no temp file or half run anywhere
    assert len(Store(results).all_rows()) == 1
