"""Naming stored runs: by id, unique id prefix or unique label; relabelling
and deleting keep the index and the folders in step."""

from __future__ import annotations

import os

import pytest

from rtforge import procfs
from rtforge.cli import main
from rtforge.errors import UserError
from rtforge.results.importers import import_file
from rtforge.results.store.runstore import Store

from ...support.runs import left_in, run, us_cpu

CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "corpus", "cyclictest")


@pytest.fixture
def named(tmp_path):
    store = Store(tmp_path / "results")
    for i, label in enumerate(["stock", "rt", None, "rt 2"]):
        store.save(run([us_cpu(0, {20: 100})], label=label, run_id=f"20260101-00000{i}-pi-000{i}"))
    return store


def test_a_run_is_named_by_id_prefix_or_label(named):
    assert named.resolve("stock") == "20260101-000000-pi-0000"
    assert named.resolve("rt") == "20260101-000001-pi-0001"           # a whole label, not a prefix of 'rt 2'
    assert named.resolve("20260101-000002") == "20260101-000002-pi-0002"
    assert named.resolve("20260101-000003-pi-0003") == "20260101-000003-pi-0003"
    assert named.resolve("last") == "20260101-000003-pi-0003"


def test_an_ambiguous_name_lists_its_candidates(named):
    named.relabel("20260101-000002-pi-0002", "stock")
    with pytest.raises(UserError, match=r"'stock' names 2 runs: 20260101-000000-pi-0000 \(stock\), "
                                        r"20260101-000002-pi-0002 \(stock\)"):
        named.resolve("stock")
    with pytest.raises(UserError, match="'2026' names 4 runs"):
        named.resolve("2026")
    with pytest.raises(UserError, match="no run has the id or label 'beta'"):
        named.resolve("beta")


def test_the_readme_journey_compare_stock_rt(named, capsys):
    assert main(["compare", "stock", "rt", "--results-dir", str(named.root)]) == 0
    out = capsys.readouterr().out
    assert out.index("stock") < out.index(" rt ") and "first run" in out


def test_relabel_and_delete_keep_index_and_folders_in_step(named, capsys):
    rd = ["--results-dir", str(named.root)]
    assert main(["label", "20260101-000002", "beta", *rd]) == 0
    assert named.resolve("beta") == "20260101-000002-pi-0002"
    assert named.load("20260101-000002-pi-0002").label == "beta"        # in result.json too
    assert main(["label", "beta", "", *rd]) == 0
    assert named.load("20260101-000002-pi-0002").label is None
    assert main(["delete", "stock", "rt", "--yes", *rd]) == 0
    left = [r.run_id for r in named.all_rows()]
    assert left == ["20260101-000002-pi-0002", "20260101-000003-pi-0003"]
    assert left_in(named.runs_dir) == left      # the files went, nothing half-deleted
    capsys.readouterr()
    assert main(["delete", "rt 2", *rd]) == 2                             # no tty, no --yes: nothing happens
    assert "give --yes" in capsys.readouterr().err and len(named.all_rows()) == 2


def test_a_running_run_is_not_deleted(named, capsys):
    r = named.load("20260101-000001-pi-0001")
    me = os.getpid()   # this test is the run's owner, alive: the run stays running
    r.state, r.owner = "running", {"pid": me, "start_ticks": int(procfs.stat_fields(me)[19])}
    named.save(r)
    assert main(["delete", "20260101-000001-pi-0001", "--yes", "--results-dir", str(named.root)]) == 2
    assert "still running" in capsys.readouterr().err


def test_imports_of_one_second_differ_early(tmp_path):
    store = Store(tmp_path / "results")
    a = import_file(os.path.join(CORPUS, "chen116-h400-4t.txt"), store)
    b = import_file(os.path.join(CORPUS, "civcode-h400-4t.txt"), store)
    assert a.run_id[16:].startswith("chen116-h400-4t-") and b.run_id[16:].startswith("civcode-h400-4t-")
    assert len(os.path.commonprefix([a.run_id, b.run_id])) < 20   # a few characters name either
