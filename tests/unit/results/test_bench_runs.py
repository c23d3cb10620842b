"""Stored bench runs: `show`, `runs` and `compare` read them, latency and
bench runs do not mix, and files of format version 1 still load."""

from __future__ import annotations

import json

import pytest

from rtforge.cli import main
from rtforge.report.compare import compare_bench
from rtforge.results.model import RunResult

from ...support.runs import bench_run

# -- stored runs: show, runs, compare -------------------------------------------


def test_compare_says_what_rt_costs(store):
    """The reference: Pi 4B, N=12, stock -> RT: multi 21.8 s -> 24.3 s, single 66.7 s -> 67.6 s."""
    stock = bench_run(store, "stock", {1: 66.7, 4: 21.8}, {1: 1000.0, 4: 3960.0}, preempt="voluntary")
    rt = bench_run(store, "RT", {1: 67.6, 4: 24.3}, {1: 990.0, 4: 3600.0})
    rows = compare_bench([stock, rt])
    assert rows[0]["versus_first"] == "first run"
    assert rows[1]["versus_first"] == (
        "RT is 1.11× slower multi-thread, 1.01× slower single-thread; "
        "stress-ng: 1.10× slower multi-thread, 1.01× slower single-thread"
    )
    four = next(t for t in rows[1]["threads"] if t["threads"] == 4)
    assert four["median_s"] == pytest.approx(24.3) and four["time_ratio_to_first"] == pytest.approx(24.3 / 21.8)
    faster = bench_run(store, "tuned", {1: 60.0, 4: 21.8})
    assert (
        compare_bench([stock, faster])[1]["versus_first"]
        == "tuned is same speed multi-thread, 1.11× faster single-thread"
    )


def test_cli_show_runs_and_compare_bench_runs(store, capsys):
    stock = bench_run(store, "stock", {1: 66.7, 4: 21.8}, {1: 1000.0, 4: 3960.0}, preempt="voluntary")
    rt = bench_run(store, "RT 6.12", {1: 67.6, 4: 24.3}, {1: 990.0, 4: 3600.0})
    root = ["--results-dir", str(store.root)]
    capsys.readouterr()
    assert main(["compare", stock.run_id, rt.run_id, *root]) == 0
    out = capsys.readouterr().out
    assert "RT 6.12 is 1.11× slower multi-thread, 1.01× slower single-thread" in out
    assert "21.8 s" in out and "24.3 s" in out and "66.7 s" in out
    assert main(["compare", stock.run_id, rt.run_id, "--json", *root]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [t["median_s"] for t in rows[1]["threads"]] == pytest.approx([67.6, 24.3])
    assert main(["show", rt.run_id, *root]) == 0
    out = capsys.readouterr().out
    assert "N-queens N=12" in out and "24.3 s" in out and "3,600" in out and "14,200" in out
    assert main(["show", rt.run_id, "--json", *root]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "bench" and doc["n"] == 12 and doc["bench"] == rt.bench
    four = next(t for t in doc["threads"] if t["threads"] == 4)
    assert four["median_s"] == pytest.approx(24.3) and four["min_s"] == pytest.approx(24.3 * 0.97)
    assert four["max_s"] == pytest.approx(24.3 * 1.05) and four["iqr_s"] == pytest.approx(24.3 * (1.02 - 0.99))
    assert main(["runs", "--json", *root]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {(r["kind"], r["max_ns"], r["p99_ns"], r["duration_s"]) for r in listed} == {("bench", None, None, 600.0)}
    assert main(["runs", *root]) == 0
    assert "RT 6.12" in capsys.readouterr().out


def test_latency_and_bench_runs_do_not_mix(store, capsys):
    bench = bench_run(store, "RT", {1: 67.6})
    latency = RunResult(
        run_id=store.new_run_id("pi4"),
        engine="probe",
        state="complete",
        host="pi4",
        start_time="2026-01-01T00:00:00+00:00",
    )
    store.save(latency)
    other_n = bench_run(store, "N10", {1: 0.5}, n=10)
    root = ["--results-dir", str(store.root)]
    for argv, says in (
        (["compare", bench.run_id, latency.run_id], "do not compare"),
        (["compare", latency.run_id, bench.run_id], "do not compare"),
        (["compare", bench.run_id, other_n.run_id], "solved different problems"),
        (["plot", bench.run_id, "-o", str(store.root / "x.svg")], "is a CPU benchmark"),
        (["report", bench.run_id, "-o", str(store.root / "x.html")], "is a CPU benchmark"),
    ):
        capsys.readouterr()
        assert main([*argv, *root]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, err
    assert not (store.root / "x.svg").exists() and not (store.root / "x.html").exists()


def test_format_version_1_files_still_load(store, capsys):
    """A result.json as rtforge wrote it before bench runs existed."""
    run_id = "20251101-120000-pi-0001"
    v1 = {
        "run_id": run_id,
        "engine": "probe",
        "state": "complete",
        "host": "pi",
        "start_time": "2025-11-01T12:00:00+00:00",
        "kind": "latency",
        "label": "old",
        "end_reason": None,
        "duration_s": 60.0,
        "requested": {"duration_s": 60},
        "config": {"interval_us": 200, "loads": []},
        "system": {"kernel_release": "6.6.0"},
        "reproducer": None,
        "engine_argv": [],
        "cpus": [
            {
                "cpu": 0,
                "count": 3,
                "min_ns": 1000,
                "max_ns": 5000,
                "sum_ns": 9000,
                "overruns": 0,
                "spikes": 0,
                "spikes_dropped": 0,
                "hist": {
                    "buckets": [[1000, 1000, 1], [3000, 3000, 1], [5000, 5000, 1]],
                    "overflow": 0,
                    "range_max_ns": None,
                },
            }
        ],
        "series": None,
        "telemetry": None,
        "top_spikes": [],
        "warnings": [],
        "source": None,
        "owner": None,
        "format_version": 1,
        "partial": False,
    }
    d = store.run_dir(run_id)
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps(v1))
    r = store.load(store.resolve(run_id))
    assert r.bench is None and r.kind == "latency" and r.max_ns == 5000
    assert main(["show", run_id, "--json", "--results-dir", str(store.root)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["max_ns"] == 5000 and doc["all"]["count"] == 3
