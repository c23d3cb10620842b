"""The matrix script's own bookkeeping (bench/pi_matrix.py): its rows merge
across runs, and its table says how much of a build came from ccache (the
counts are kernel.kbuild.ccache_counts, tested with the ccache tests).  The
builds and boots themselves are the matrix's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location("pi_matrix", Path(__file__).parents[3] / "bench" / "pi_matrix.py")
pi_matrix = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pi_matrix)


def row(board, machine, **more):
    return {"board": board, "source": "debian:latest", "machine": machine, "release": "7.3.4-rt-rtforge",
            "build_s": 600, "objects": 100, "booted": True, "boot_s": 9, "preempt_rt": True, "probe_samples": 5,
            "passed": True, **more}


def test_a_new_run_replaces_its_own_rows_and_a_failed_build(tmp_path):
    path = tmp_path / "matrix.json"
    old = [row("pi1", "raspi0", date="then"), row("pi4-64", "raspi3b", date="then"),
           {"board": "pi5", "source": "debian:latest", "machine": "-", "error": "no space", "build_s": 3}]
    path.write_text(json.dumps({"date": "then", "rows": old}))
    new = [row("pi4-64", "raspi3b", probe_samples=7), row("pi5", "virt (stand-in)")]
    rows = pi_matrix.merged(path, new, "now")["rows"]
    assert [(r["board"], r["machine"], r["date"]) for r in rows] == [
        ("pi1", "raspi0", "then"), ("pi4-64", "raspi3b", "now"), ("pi5", "virt (stand-in)", "now")]
    assert rows[1]["probe_samples"] == 7


def test_the_table_shows_the_share_of_ccache_hits_and_failures():
    text = pi_matrix.table([row("pi5", "virt (stand-in)", ccache_hits=90, ccache_misses=10), row("pi2", "raspi2b"),
                            {"board": "pi4-32", "source": "debian:latest", "machine": "-", "error": "out of disk"}])
    lines = text.splitlines()
    assert "| 100 (90%) |" in lines[2] and "| 100 |" in lines[3]       # no counts (older rows): no share
    assert "failed: out of disk" in lines[4]


def test_the_table_shows_the_page_size_the_guest_got():
    lines = pi_matrix.table([row("pi5", "virt (stand-in)", page_size=16384), row("pi1", "raspi0")]).splitlines()
    assert "| 16K |" in lines[2] and "| ? |" in lines[3]        # rows from before the column: unknown
