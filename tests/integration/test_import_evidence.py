"""What `show`, the report and `--json` say of imported runs, on real files of
the corpus (tests/corpus/cyclictest, their truths in SOURCES.tsv): no figure
claims more than the file holds (issue 35, "wrong or misleading figures")."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from rtforge.cli import main
from rtforge.report.verdict import verdict
from rtforge.results.store.runstore import Store

CORPUS = Path(__file__).parents[1] / "corpus" / "cyclictest"


def _import(tmp_path, name: str, capsys) -> list[str]:
    rd = ["--results-dir", str(tmp_path / "store")]
    assert main(["import", str(CORPUS / name), *rd]) == 0
    capsys.readouterr()
    return rd


def test_an_import_says_its_telemetry_was_not_recorded(tmp_path, capsys):
    """Nobody observed the board an imported file came from: 'no sensor' and
    'not reported by this board' were claims about it."""
    rd = _import(tmp_path, "chen116-h400-4t.txt", capsys)
    assert main(["show", "last", *rd]) == 0
    out = capsys.readouterr().out
    assert "temperature: not recorded · throttling: not recorded" in out, out
    assert "no sensor" not in out and "not reported" not in out
    assert main(["report", "last", "-o", str(tmp_path / "r.html"), *rd]) == 0
    html = (tmp_path / "r.html").read_text()
    telemetry = html[html.index('id="telemetry"'):]
    row = re.search(r"<tr><td>[^<]*</td>(.*?)</tr>", telemetry)[1]
    assert row.count("not recorded") == 4 and "no sensor" not in row, row


def test_late_wake_ups_are_counted_per_thread(tmp_path, capsys):
    """koen-h400-4t-100M-nort.txt: maxima 19,968, 255, 2,170 and 1,641 µs, and
    4, 0, 3 and 2 samples beyond its 400 µs histogram (SOURCES.tsv).  At 1 ms
    three threads' maxima were late: at least 3, at most the 9 overflowed
    samples; at 300 µs every overflowed sample (over 399 µs) was late: the
    count is exact."""
    rd = _import(tmp_path, "koen-h400-4t-100M-nort.txt", capsys)
    assert main(["report", "last", "-C", "1ms", "-o", str(tmp_path / "r.html"), *rd]) == 0
    out = capsys.readouterr().out
    assert "FAIL: " in out and "at least 3 of 399,999,922 wake-ups came later" in out and "at most 9" in out, out
    store = Store(tmp_path / "store")
    r = store.load(store.resolve("last"))
    v = verdict(r, 1_000_000)
    assert (v.status, v.above, v.above_exact, v.above_at_most) == ("fail", 3, False, 9)
    v = verdict(r, 300_000)
    beyond_300 = sum(int(c.hist.count[c.hist.lo_ns > 300_000].sum()) + c.hist.overflow for c in r.cpus)
    assert (v.status, v.above, v.above_exact) == ("fail", beyond_300, True), v
    assert f"{beyond_300:,} of 399,999,922 wake-ups came later" in v.sentence and "at least" not in v.sentence


def test_a_csv_import_states_no_overflow_and_lower_bound_percentiles(tmp_path, capsys, monkeypatch):
    """civcode-blogcsv-rt.csv is the blog recipe's CSV: grep removed the
    '# Histogram Overflows:' line, so the overflow is unknown (its own warning
    says so) and its percentiles are lower bounds: never 'overflow 0', never
    a ratio such as 'p99 11.6× lower' (issue 35)."""
    rd = _import(tmp_path, "civcode-blogcsv-rt.csv", capsys)
    assert main(["show", "last", "--json", *rd]) == 0
    shown = json.loads(capsys.readouterr().out)
    for s in [shown["all"], *shown["cpus"]]:
        assert s["overflow"] is None and s["percentiles_lower_bounds"] is True, s
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["show", "last", *rd]) == 0
    out = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("│")] for line in out.splitlines() if "│" in line]
    assert len(rows) == 5 and all(len(row) == 12 for row in rows), out
    assert all(row[11] == "?" for row in rows), out                  # the overflow column
    assert all(cell.startswith("≥") for row in rows for cell in row[4:8]), out   # p50 to p99.99
    csv_id = shown["run_id"]
    assert main(["import", str(CORPUS / "civcode-h400-4t.txt"), *rd]) == 0
    capsys.readouterr()
    assert main(["compare", "last", csv_id, "--json", *rd]) == 0
    csv_row = json.loads(capsys.readouterr().out)[1]
    assert "p99 not comparable" in csv_row["versus_first"] and "p99 n/a" not in csv_row["versus_first"], csv_row
    assert csv_row["ratio_to_first"]["p99_ns"] is None and csv_row["overflow"] is None
    assert main(["report", csv_id, "-o", str(tmp_path / "r.html"), *rd]) == 0
    html = (tmp_path / "r.html").read_text()
    latency = html[html.index('id="latency"'):html.index('id="plots"')]
    cells = re.findall(r'<td class="num">([^<]*)</td>', latency)
    assert cells.count("?") == 4 and sum(c.startswith("≥") for c in cells) == 8, cells   # p99 and p99.99 × 4


GOLDEN = Path(__file__).parents[1] / "golden" / "cyclictest"


def test_an_import_too_short_to_judge_says_so(tmp_path, capsys):
    """golden summary.txt states no duration, but its threads' wake-ups and
    intervals: 4,997 at 200 µs and 1,429 at 700 µs, about 1 s.  That is far
    under an hour, so the verdict warns as it does for a run (a 10,000-cycle
    import used to PASS clean)."""
    rd = ["--results-dir", str(tmp_path / "store")]
    assert main(["import", str(GOLDEN / "summary.txt"), *rd]) == 0
    capsys.readouterr()
    store = Store(tmp_path / "store")
    r = store.load(store.resolve("last"))
    assert r.duration_s == max(4997 * 200, 1429 * 700) / 1e6
    assert main(["report", "last", "-C", "1ms", "-o", str(tmp_path / "r.html"), *rd]) == 0
    capsys.readouterr()
    html = (tmp_path / "r.html").read_text()
    assert "the run lasted 1 s (its wake-ups times their interval: the file states no duration): too short" in html
    assert main(["show", "last", *rd]) == 0
    assert "≈1 s" in capsys.readouterr().out


def test_an_import_says_its_time_and_id_come_from_the_file_s_mtime(tmp_path, capsys):
    """The run's start time and id were the file's modification time, unsaid."""
    out_file = tmp_path / "out.txt"
    out_file.write_bytes((Path(__file__).parents[1] / "golden" / "cyclictest" / "hist.txt").read_bytes())
    os.utime(out_file, (1_700_000_000, 1_700_000_000))          # 2023-11-14T22:13:20Z
    assert main(["import", str(out_file), "--results-dir", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert ("the file states no start time: the file's modification time, 2023-11-14T22:13:20Z, is taken as the "
            "run's (its id holds it)") in " ".join(out.split()), out
