"""The corpus is a test: every real-world cyclictest output in
tests/corpus/cyclictest imports with exactly the values its SOURCES.tsv
states, or -- when it really is damaged -- is refused with FILE:LINE; and
every imported run renders a report.

The truth comes from SOURCES.tsv (what each file's own lines say, written
down when the corpus was collected), never from rtforge."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.importers import import_file
from rtforge.results.stats import summarize_cpu
from rtforge.results.store.runstore import Store

CORPUS = Path(__file__).parents[1] / "corpus" / "cyclictest"
SOURCES = {row["filename"]: row for row in csv.DictReader(open(CORPUS / "SOURCES.tsv"), delimiter="\t")}

# Really damaged, decided from SOURCES.tsv's notes and the files themselves:
# the line the refusal must name, and a word its sentence must hold.
DAMAGED = {
    # cut off after row 009998 of -h 10000: no footer at all
    "amro-h10000-8t-truncated.txt": (10001, "cut off"),
    # the same run twice, the second glued to the last line of the first
    "koen-h400-4t-duplicated-concat.txt": (412, "glued"),
}


def _numbers(field: str, key: str) -> list[int] | None:
    """'max_us=1,2,3' -> [1, 2, 3]; an entry noting a second, worse value
    ('6719(... says 8719)') counts as the worse one, as cyclictest's max
    never falls within a run."""
    m = re.search(rf"{re.escape(key)}=(.*?)(?:\s+\w+(?:\([^)]*\))?=|$)", field)
    if not m:
        return None
    out = []
    for entry in re.findall(r"\d+(?:\([^)]*\))?", m[1]):
        values = [int(entry.split("(")[0])] + [int(v) for v in re.findall(r"says (\d+)", entry)]
        out.append(max(values))
    return out


def truth(name: str) -> dict:
    row = SOURCES[name]
    maxes, counts = row["truth_max_us_per_thread"], row["truth_cycles"]
    return {
        "max_us": _numbers(maxes, "max_us"),
        "highest_us": _numbers(maxes, "highest non-empty bucket"),
        "binned": _numbers(counts, "binned samples"),
        "cycles": _numbers(counts, "cycles(Total+Overflows)") or _numbers(counts, "cycles") or _numbers(counts, "C"),
        "overflows": _numbers(counts, "overflows"),
    }


FILES = sorted(name for name in SOURCES if name not in DAMAGED)


def test_the_corpus_is_complete():
    on_disk = {p.name for p in CORPUS.iterdir()} - {"SOURCES.tsv"}
    assert on_disk == set(SOURCES)
    assert len(FILES) + len(DAMAGED) == len(SOURCES) == 29


@pytest.mark.parametrize("name", FILES)
def test_imports_with_the_values_its_source_states(name, tmp_path):
    t = truth(name)
    r = import_file(CORPUS / name, Store(tmp_path))
    cpus = r.cpus
    if t["binned"] is not None:  # the blog CSV: only the histogram survived grep
        assert [c.hist.in_range for c in cpus] == t["binned"]
        assert [int(c.hist.hi_ns[c.hist.count > 0].max()) // 1000 for c in cpus] == t["highest_us"]
        assert all(c.max_ns is None and not c.hist.overflow_known for c in cpus)  # grep removed the overflow line
        return
    n = len(cpus)
    maxes = t["max_us"]
    if len(maxes) == n + 1:  # -H: the last value is the all-threads total
        assert maxes[n] == max(maxes[:n])
        maxes = maxes[:n]
    assert [c.max_ns // 1000 for c in cpus] == maxes
    if t["cycles"] is not None:
        assert [c.count for c in cpus] == t["cycles"]
    if t["overflows"] is not None:
        assert [c.hist.overflow for c in cpus] == t["overflows"][:n]
    if r.source["format"] == "cyclictest-histogram" or r.source["format"] == "cyclictest-histofall":
        for c in cpus:  # every sample accounted for, the histogram agrees with the footer
            assert c.count == c.hist.total
            if not c.hist.overflow:
                assert int(c.hist.hi_ns[c.hist.count > 0].max()) == c.max_ns


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_damaged_files_are_refused_with_file_and_line(name, tmp_path, capsys):
    line, word = DAMAGED[name]
    path = CORPUS / name
    assert main(["import", str(path), "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rtforge: error: {path}:{line}: ") and word in err and err.count("\n") == 1, err
    assert Store(tmp_path).all_rows() == []


def test_status_line_imports_have_unknown_percentiles_and_the_worse_max(tmp_path, capsys):
    """romansereda-summary-std-4t-redraw.txt shows thread 2 twice: Max 8719, then 6719."""
    rd = ["--results-dir", str(tmp_path)]
    assert main(["import", str(CORPUS / "romansereda-summary-std-4t-redraw.txt"), *rd]) == 0
    out = capsys.readouterr().out
    r = Store(tmp_path).load(Store(tmp_path).resolve("last"))
    assert r.cpus[2].max_ns == 8719_000 and r.cpus[2].count == 1005574
    for c in r.cpus:
        s = summarize_cpu(c)
        assert s.p99_ns is None and not s.histogram
    assert "unknown" in out and "> range" not in out


def test_rt_tests_2x_sparse_rows_keep_their_buckets(tmp_path):
    """Only the non-empty rows are printed: bucket 340 of thread 2 is one sample at 340 µs."""
    r = import_file(CORPUS / "neurorust-h400-rt280-6t.hist", Store(tmp_path))
    c = r.cpus[2]
    assert c.hist.lo_ns[-1] == 340_000 and c.hist.count[-1] == 1
    assert r.cpus[0].hist.lo_ns[0] == 2_000 and r.cpus[0].hist.count[0] == 215519


@pytest.mark.slow
def test_a_blog_csv_with_late_samples_fails_a_short_cycle(tmp_path, capsys):
    """lemariva-stdkernel_model_b.csv holds samples at 382 µs: a 250 µs cycle fails, whatever the unknown max."""
    rd = ["--results-dir", str(tmp_path)]
    assert main(["import", str(CORPUS / "lemariva-stdkernel_model_b.csv"), *rd]) == 0
    capsys.readouterr()
    assert main(["report", "last", "-C", "250us", "-o", str(tmp_path / "r.html"), *rd]) == 0
    out = capsys.readouterr().out
    assert out.startswith("FAIL: ") and "at least" in out
    assert main(["report", "last", "-C", "1ms", "-o", str(tmp_path / "r.html"), *rd]) == 0
    assert capsys.readouterr().out.startswith("UNKNOWN: ")  # below 1 ms nothing is proven, nor is a pass


@pytest.mark.slow
def test_every_imported_run_renders_a_report_and_a_cdf(tmp_path, capsys):
    rd = ["--results-dir", str(tmp_path / "store")]
    for name in FILES:
        assert main(["import", str(CORPUS / name), *rd]) == 0, name
    ids = [r.run_id for r in Store(tmp_path / "store").all_rows()]
    assert len(ids) == len(FILES)
    assert main(["report", *ids, "-C", "1ms", "-o", str(tmp_path / "all.html"), *rd]) == 0
    html = (tmp_path / "all.html").read_text()
    store = Store(tmp_path / "store")
    status_only = [i for i in ids if not any(c.hist.in_range for c in store.load(i).cpus)]  # no sample in range
    assert status_only
    # a histogram per run that kept one, the exceedance and the overlay; the others say why they have none
    assert html.count("<svg") >= len(FILES) - len(status_only) + 2
    assert html.count("No latency histogram for") == len(status_only)
    capsys.readouterr()
    for run in status_only:  # matplotlib once failed: "Data cannot be log-scaled"
        assert main(["plot", run, "--kind", "cdf", "-o", str(tmp_path / f"{run}.svg"), *rd]) == 2
        assert "nothing to plot" in capsys.readouterr().err and not (tmp_path / f"{run}.svg").exists()
        assert main(["report", run, "-f", "md", "-o", str(tmp_path / f"{run}.md"), *rd]) == 0
        assert "unknown" in (tmp_path / f"{run}.md").read_text()
