"""Importing rtla timerlat's output (real files: tests/fixtures/rtla/import,
made with rtla 6.12 in the RT guest, NOTES.md there).  Every expectation is
read from the file's own lines with the small regexes below, never from
rtforge's parser: its `max:` line, its rows and `over:`, top's columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.errors import UserError
from rtforge.report.verdict import verdict
from rtforge.results.importers import import_file, parse
from rtforge.results.stats import summarize_cpu
from rtforge.results.store.runstore import Store

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rtla" / "import"
REFUSED = {"hist-noheader.txt": "--no-header", "hist-noindex-zeros.txt": "--no-index"}
HISTS = sorted(p.name for p in FIXTURES.glob("hist*.txt") if p.name not in REFUSED)
TOPS = sorted(p.name for p in FIXTURES.glob("top*.txt")) + ["docs-top-a40.txt"]


def columns(text: str) -> dict[str, dict]:
    """'Thr-000' -> its rows {first value: count} and summary {over, count, min, avg, max} as printed."""
    names = re.search(r"^Index(.*)$", text, re.M)[1].split()
    out = {n: {"rows": {}, "summary": {}} for n in names}
    for m in re.finditer(r"^(\d+)((?: +\d+)+) *$", text, re.M):
        for n, v in zip(names, m[2].split()):
            if int(v):
                out[n]["rows"][int(m[1])] = int(v)
    # the per-CPU summary lines come before the ALL section
    head = text.split("\nALL:")[0]
    for key in ("over", "count", "min", "avg", "max"):
        if m := re.search(rf"^{key}:(.*)$", head, re.M):
            for n, v in zip(names, m[1].split()):
                out[n]["summary"][key] = v
    return out


def unit_of(text: str) -> int:
    return 1 if "# Time unit is nanoseconds" in text else 1000


@pytest.mark.parametrize("name", HISTS)
def test_hist_imports_with_what_each_column_states(name, tmp_path):
    text = (FIXTURES / name).read_text()
    unit = unit_of(text)
    cols = columns(text)
    r = import_file(FIXTURES / name, Store(tmp_path))
    assert r.source["format"] == "rtla-timerlat-hist" and r.engine == "import"
    threads = {int(n[4:]): c for n, c in cols.items() if n.startswith("Thr-")}
    assert [c.cpu for c in r.cpus] == sorted(threads)
    for c in r.cpus:
        col = threads[c.cpu]
        s = col["summary"]
        over = int(s["over"])
        assert c.hist.overflow == over and c.hist.in_range == sum(col["rows"].values())
        assert c.count == int(s.get("count", sum(col["rows"].values()) + over))
        if "max" in s:                                   # the maximum the file states, to the unit
            assert c.max_ns == (None if s["max"] == "-" else int(s["max"]) * unit)
            assert c.min_ns == (None if s["min"] == "-" else int(s["min"]) * unit)
        elif over:
            assert c.max_ns is None                      # --no-summary: beyond the rows nothing is known
        assert sorted(c.hist.lo_ns.tolist()) == sorted(b * unit for b in col["rows"])
    others = r.source["other_latencies"]
    for n, col in cols.items():
        if n.startswith("Thr-"):
            continue
        kept = {o["cpu"]: o for o in others["irq" if n.startswith("IRQ") else "user"]}[int(n[4:])]
        assert kept["overflow"] == int(col["summary"]["over"])
        if "max" in col["summary"]:
            assert kept["max_ns"] == (None if col["summary"]["max"] == "-" else int(col["summary"]["max"]) * unit)
    duration = re.search(r"^# Duration:\s*(\d+) (\d\d):(\d\d):(\d\d)$", text, re.M)
    assert r.duration_s == int(duration[1]) * 86400 + int(duration[2]) * 3600 + int(duration[3]) * 60 + \
        int(duration[4])


def test_hist_bucket_size_is_read_from_its_rows(tmp_path):
    """-b 10 (hist-over.txt) and -b 100 --with-zeros (hist-zeros.txt): the
    rows' first values are 10 and 100 apart; a bucket holds [first,
    first + size) in whole µs, and with every row printed the table's size
    is known."""
    r = import_file(FIXTURES / "hist-over.txt", Store(tmp_path / "a"))
    h = r.cpus[0].hist
    assert r.config["rtla_bucket_ns"] == 10_000 and ((h.hi_ns - h.lo_ns) == 9_000).all()
    r = import_file(FIXTURES / "hist-zeros.txt", Store(tmp_path / "b"))
    assert r.config["rtla_bucket_ns"] == 100_000 and r.config["histogram_us"] == 2000
    assert r.cpus[0].hist.range_max_ns == 1_999_000


@pytest.mark.parametrize("name", TOPS)
def test_top_imports_with_the_thread_latency_it_states(name, tmp_path):
    text = (FIXTURES / name).read_text()
    last = text.split("\x1bc")[-1]                       # the last refresh is the run
    unit = 1 if "Latency (ns)" in last else 1000
    r = import_file(FIXTURES / name, Store(tmp_path))
    assert r.source["format"] == "rtla-timerlat-top"
    rows = re.findall(r"^\s*(\d+) #(\d+)\s*\|((?:\s*\S+){4})\s*\|((?:\s*\S+){4})", last, re.M)
    assert [c.cpu for c in r.cpus] == [int(cpu) for cpu, *_ in rows]
    for i, (c, (_, count, irq, thread)) in enumerate(zip(r.cpus, rows)):
        cur, low, avg, high = thread.split()
        assert c.count == int(count) and c.max_ns == int(high) * unit and c.min_ns == int(low) * unit
        assert c.sum_ns == int(avg) * unit * int(count)
        s = summarize_cpu(c)
        assert not s.histogram and s.p99_ns is None      # top keeps no histogram
        assert r.source["other_latencies"]["irq"][i]["max_ns"] == int(irq.split()[3]) * unit
    assert any("counts each CPU's timer IRQs" in w for w in r.warnings)


@pytest.mark.parametrize("name", ["osnoise-hist.txt", "osnoise-top-q.txt"])
def test_osnoise_output_is_refused_in_one_sentence(name, tmp_path, capsys):
    assert main(["import", str(FIXTURES / name), "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rtla osnoise" in err and "rtla timerlat hist" in err, err
    assert Store(tmp_path).all_rows() == []


@pytest.mark.parametrize("name", REFUSED)
def test_output_without_its_headers_or_index_is_refused_naming_what_it_lacks(name, tmp_path, capsys):
    """--no-header leaves the columns unnamed; --no-index (which rtla allows
    only with --with-zeros) leaves the rows without their bucket."""
    assert main(["import", str(FIXTURES / name), "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{FIXTURES / name}:" in err and REFUSED[name] in err and err.count("\n") == 1, err


def _as_rtla_61(text: str) -> str:
    """The same output as rtla 6.1 printed it (timerlat_hist.c before 6.8):
    no ALL section, and a column without samples printing min as ~0ULL,
    avg '-' and max 0 where newer rtla prints '-'."""
    head = text.split("\nALL:")[0] + "\n"
    out = []
    for line in head.splitlines(keepends=True):
        key = line.split(":")[0]
        if key in ("min", "max") and " - " in line + " ":
            empty = "18446744073709551615" if key == "min" else "0"
            line = re.sub(r"(?<= )-(?= |$)", empty, line.rstrip("\n")) + "\n"
        out.append(line)
    return "".join(out)


def test_older_rtla_without_all_section_and_with_its_empty_sentinel(tmp_path):
    """hist-user.txt's Usr column holds no sample: rtla 6.1 printed it as
    min 18446744073709551615 and max 0, and printed no ALL section."""
    text = (FIXTURES / "hist-user.txt").read_text()
    old = _as_rtla_61(text)
    assert "18446744073709551615" in old and "ALL:" not in old
    path = tmp_path / "old.txt"
    path.write_text(old)
    r = import_file(path, Store(tmp_path / "s"))
    new = import_file(FIXTURES / "hist-user.txt", Store(tmp_path / "n"))
    assert [c.to_dict() for c in r.cpus] == [c.to_dict() for c in new.cpus]
    [user] = r.source["other_latencies"]["user"]
    assert user["count"] == 0 and user["min_ns"] is None and user["max_ns"] is None


def test_a_damaged_hist_is_refused_at_its_line(tmp_path):
    text = (FIXTURES / "hist.txt").read_text()
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("count:"))
    path = tmp_path / "edited.txt"
    path.write_text(re.sub(r"^count:(\s+)(\d+)", lambda m: f"count:{m[1]}{int(m[2]) + 1}", text, flags=re.M,
                           count=1))
    with pytest.raises(UserError, match=rf"edited.txt:{line}: IRQ-000's count is"):
        parse(path, path.read_bytes())
    cut = "\n".join(text.splitlines()[:line - 2]) + "\n"      # cut inside the rows
    path.write_text(cut)
    with pytest.raises(UserError, match="expected the 'over:' line after the histogram rows; the file is cut off"):
        parse(path, path.read_bytes())


def test_an_index_of_six_digits_glued_to_a_nine_digit_count_is_split(tmp_path):
    """'%-6d' then '%9d ': bucket 123456 and a count of 123456789 print as one
    word (a large -E with -b, a long run); the widths say where it splits."""
    path = tmp_path / "glued.txt"
    path.write_text("# RTLA timerlat histogram\n# Time unit is microseconds (us)\n# Duration:   0 01:00:00\n"
                    "Index   Thr-000\n123456123456789 \nover:         0 \ncount: 123456789 \nmin:     123456 \n"
                    "avg:     123456 \nmax:     123456 \n")
    r = import_file(path, Store(tmp_path / "s"))
    assert r.cpus[0].hist.lo_ns.tolist() == [123456_000] and r.cpus[0].count == 123456789


def test_an_rtla_run_is_judged_on_its_thread_latency(tmp_path):
    """hist.txt's Thr max, not its lower IRQ max, decides the verdict."""
    text = (FIXTURES / "hist.txt").read_text()
    thr = int(columns(text)["Thr-000"]["summary"]["max"])
    r = import_file(FIXTURES / "hist.txt", Store(tmp_path))
    assert verdict(r, (thr - 1) * 1000).status == "fail" and verdict(r, thr * 2000).status == "pass"
    assert r.duration_s == 10 and any("the run lasted 10 s" in w for w in verdict(r, thr * 2000).warnings)


@pytest.mark.parametrize("name", ["hist-user.txt", "top-u-q.txt"])
def test_rtla_s_own_error_line_before_its_output_is_named_and_skipped(name, tmp_path):
    """Saved with 2>&1, the file starts with what rtla said on standard error
    (here the real line of NOTES.md: a 6.1 kernel has no user-space timerlat)."""
    said = "Error opening osnoise/per_cpu/cpu0/timerlat_fd:No such file or directory"
    path = tmp_path / name
    path.write_text(said + "\n" + (FIXTURES / name).read_text())
    r = import_file(path, Store(tmp_path / "s"))
    plain = import_file(FIXTURES / name, Store(tmp_path / "p"))
    assert [c.to_dict() for c in r.cpus] == [c.to_dict() for c in plain.cpus]
    assert any(w.startswith(f"line 1 ('{said[:39]}") and "skipped" in w for w in r.warnings), r.warnings


def test_a_top_stopped_at_its_threshold_keeps_rtla_s_analysis(tmp_path):
    """The EXAMPLE of the kernel's Documentation/tools/rtla/rtla-timerlat-top.rst
    (an older rtla: no ALL line), a -a 40 run that CPU 23 stopped at 41 µs:
    the analysis that follows is kept as --trace keeps it, naming the thread
    that blocked the timer IRQ, and the run is said to be cut short."""
    r = import_file(FIXTURES / "docs-top-a40.txt", Store(tmp_path))
    assert [c.cpu for c in r.cpus] == list(range(1, 24)) and r.cpus[-1].max_ns == 41_000
    assert r.source["command_line"] == "timerlat -a 40 -c 1-23 -q"
    [spike] = r.trace["spikes"]
    assert spike["cpu"] == 23 and spike["total_us"] == 41.96 and "objtool:49256" in spike["culprit"]
    assert r.trace["max_idle_exit"] == {"us": 17.48, "cpu": 4}
    assert any("stopped itself at its -a/-T/-i threshold" in w for w in r.warnings)


def test_a_hist_stopped_at_its_threshold_keeps_rtla_s_analysis(tmp_path):
    """hist-stop.txt: -T 30000 stopped the run after a second, CPU 0's thread
    281,272 µs late (its Thr max); the analysis that follows names the part
    that took the time, and the run is said to be cut short."""
    text = (FIXTURES / "hist-stop.txt").read_text()
    thr_max = int(columns(text)["Thr-000"]["summary"]["max"])
    r = import_file(FIXTURES / "hist-stop.txt", Store(tmp_path))
    assert r.cpus[0].max_ns == thr_max * 1000
    [spike] = r.trace["spikes"]
    assert spike["cpu"] == 0 and spike["kind"] == "thread" and int(spike["total_us"]) == thr_max
    idle = re.search(r"Max timerlat IRQ latency from idle: ([0-9.]+) us in cpu (\d+)", text)
    assert r.trace["max_idle_exit"] == {"us": float(idle[1]), "cpu": int(idle[2])}
    assert any("stopped itself at its -a/-T/-i threshold" in w for w in r.warnings)
