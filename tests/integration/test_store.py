"""The run store: JSON files are the truth, the SQLite index is rebuilt from them."""

from __future__ import annotations

import json
import sqlite3
import subprocess

import pytest

from rtforge.errors import UserError
from rtforge.measure import lifecycle
from rtforge.results.hist import Histogram
from rtforge.results.model import FORMAT_VERSION, CpuResult, RunResult
from rtforge.results.store.runstore import Store

from ..support.procs import probe_measured


def make_run(store: Store, label="x", max_ns=50_000, start="2026-01-01T00:00:00+00:00", **kw) -> RunResult:
    hist = Histogram.from_buckets([[10_000, 10_000, 98], [20_000, 20_000, 1], [max_ns, max_ns, 1]])
    r = RunResult(run_id=store.new_run_id("pi4"), engine="probe", state="complete", host="pi4", start_time=start,
                  label=label, config={"interval_us": 200, "loads": ["cpu"]},
                  system={"kernel_release": "6.12.0-rt", "preempt_model": "rt"},
                  cpus=[CpuResult(cpu=0, count=100, min_ns=10_000, max_ns=max_ns, sum_ns=1_030_000 + max_ns,
                                  overruns=0, hist=hist)], **kw)
    store.save(r)
    return r


def test_round_trip_and_index(store):
    r = make_run(store)
    back = store.load(r.run_id)
    assert back.to_dict() == r.to_dict()
    doc = json.loads((store.run_dir(r.run_id) / "result.json").read_text())
    assert doc["format_version"] == FORMAT_VERSION and doc["partial"] is False
    [row] = store.all_rows()
    assert (row.run_id, row.max_ns, row.p99_ns, row.loads, row.kernel_release) == \
        (r.run_id, 50_000, 20_000, "cpu", "6.12.0-rt")


def test_index_is_rebuilt_when_missing_or_of_another_version(store):
    a, b = make_run(store, "a"), make_run(store, "b", start="2026-01-02T00:00:00+00:00")
    store.db_path.unlink()
    assert [r.run_id for r in store.all_rows()] == [a.run_id, b.run_id]
    with sqlite3.connect(store.db_path) as db:
        db.execute("PRAGMA user_version = 99")
    assert len(store.all_rows()) == 2
    (store.runs_dir / "not-a-run").mkdir()
    assert store.reindex() == 2


def test_resolve(store):
    a = make_run(store, start="2026-01-01T00:00:00+00:00")
    b = make_run(store, start="2026-01-02T00:00:00+00:00")
    assert store.resolve("last") == b.run_id
    assert store.resolve(a.run_id) == a.run_id
    with pytest.raises(UserError, match="names 2 runs"):
        store.resolve("2026")
    with pytest.raises(UserError, match="no run has the id or label 'zzz'"):
        store.resolve("zzz")


def test_newer_format_is_refused_with_advice(store):
    r = make_run(store)
    path = store.run_dir(r.run_id) / "result.json"
    doc = json.loads(path.read_text())
    doc["format_version"] = FORMAT_VERSION + 1
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="upgrade rtforge"):
        store.load(r.run_id)


def test_find_by_source(store):
    r = make_run(store, source={"file": "out.txt", "sha256": "ab" * 32})
    assert store.find_by_source("ab" * 32) == r.run_id
    assert store.find_by_source("cd" * 32) is None


def test_hostile_host_names_make_safe_ids(store):
    run_id = store.new_run_id("../../etc/passwd; rm -rf /")
    assert "/" not in run_id and " " not in run_id and ";" not in run_id


@pytest.mark.root
@pytest.mark.slow
def test_running_run_of_a_dead_owner_is_salvaged_from_the_checkpoint(store, probe):
    """An owner pid that no longer exists and a probe killed mid-run."""
    r = RunResult(run_id=store.new_run_id("vm"), engine="probe", state="running", host="vm",
                  start_time="2026-01-01T00:00:00+00:00", owner={"pid": 999_999_999, "start_ticks": 1})
    raw = store.run_dir(r.run_id) / "raw"
    raw.mkdir(parents=True)
    store.save(r)
    p = subprocess.Popen([str(probe), "--out", str(raw), "--interval-us", "1000", "--checkpoint-s", "1"])
    probe_measured(raw, checkpoint=True)
    p.kill()
    p.wait()
    [row] = store.all_rows()
    assert row.state == "running"             # reading the store settles nothing, starts nothing
    assert lifecycle.settle(store) == [r.run_id]
    [row] = store.all_rows()
    assert row.state == "killed" and row.partial and row.max_ns is not None
    back = store.load(r.run_id)
    assert back.owner is None and all(c.count > 0 and c.count + c.overruns > 500 for c in back.cpus)
