"""Importing real cyclictest outputs (tests/golden/cyclictest, made by its
generate.sh with the installed cyclictest).  Every expectation is read from
the file's own summary lines with the small regexes below, never from
rtforge's parsers: the summary lines are the independent truth."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from rtforge.results.importers import import_file
from rtforge.results.stats import summarize_all, summarize_cpu

GOLDEN = Path(__file__).parents[2] / "golden" / "cyclictest"
US, NS = 1000, 1

# Text outputs with a histogram, and the unit their values are in (the -N
# ones as generate.sh made them).
HIST_FILES = {"hist.txt": US, "histofall.txt": US, "spike.txt": US, "break.txt": US, "hist-tty.txt": US,
              "run.txt": US, "nsecs.txt": NS, "run-nsecs.txt": NS}
SUMMARY_FILES = {"summary.txt": US, "summary-tty.txt": US, "summary-nsecs.txt": NS, "run-nohist.txt": US}


VERBOSE_FILES = {"verbose.txt": US, "verbose-quiet.txt": US, "verbose-nsecs.txt": NS}


def footer(text: str, key: str) -> list[int]:
    return [int(v) for v in re.search(rf"^# {key}:(.*)$", text, re.M)[1].split()]


def columns(text: str) -> list[list[int]]:
    """Histogram rows 'bucket count count ...' -> one list per column (bucket column dropped)."""
    rows = [[int(v) for v in line.split()[1:]] for line in text.splitlines() if re.match(r"^\d{6} ", line)]
    assert [int(line.split()[0]) for line in text.splitlines() if re.match(r"^\d{6} ", line)] == list(range(len(rows)))
    return [list(c) for c in zip(*rows)]


def statuses(text: str) -> dict[int, dict[str, int]]:
    """The last 'T: n (pid) ...' line of each thread."""
    out = {}
    pattern = r"T:\s*(\d+) \(\s*\d+\) P:\s*(\d+) I:(\d+) C:\s*(\d+) Min:\s*(\d+) Act:\s*\d+ Avg:\s*(\d+) Max:\s*(\d+)"
    for m in re.finditer(pattern, text):
        out[int(m[1])] = dict(zip(("prio", "interval", "cycles", "min", "avg", "max"), map(int, m.groups()[1:])))
    return out


def expected_percentile(col: list[int], overflow: int, q: float, unit: int) -> int | None:
    """Inverted-CDF percentile over the real samples, overflowed ones as +inf."""
    samples = np.concatenate([np.repeat(np.arange(len(col), dtype=float), col), np.full(overflow, np.inf)])
    v = np.percentile(samples, q, method="inverted_cdf")
    return None if math.isinf(v) else int(v) * unit


def test_every_golden_file_is_covered():
    script = (GOLDEN / "generate.sh").read_text()
    made = set(re.findall(r"> ([\w.-]+\.(?:txt|csv))", script)) | set(re.findall(r"--json=([\w.-]+)", script))
    tested = set(HIST_FILES) | set(SUMMARY_FILES) | {"recipe.csv", "recipe-histofall.csv", "recipe-tty.csv",
                                                     "run.json", "run-nsecs.json", "run-nohist.json",
                                                     "other.txt", "summary-lines.txt", "session.txt",
                                                     *VERBOSE_FILES}
    assert made == tested
    assert {p.name for p in GOLDEN.iterdir()} == made | {"generate.sh"}


@pytest.mark.parametrize("name", HIST_FILES)
def test_histogram_text_matches_its_summary_lines(name, store):
    text = (GOLDEN / name).read_text()
    unit = HIST_FILES[name]
    r = import_file(GOLDEN / name, store)
    total, mins, maxes, overflow = (footer(text, k) for k in ("Total", "Min Latencies", "Max Latencies",
                                                                "Histogram Overflows"))
    n = len(mins)
    cols = columns(text)[:n]
    assert [c.cpu for c in r.cpus] == list(range(n))
    for j, c in enumerate(r.cpus):
        assert c.count == total[j] + overflow[j]
        assert c.hist.in_range == total[j] and c.hist.overflow == overflow[j]
        assert c.min_ns == mins[j] * unit
        assert c.max_ns == maxes[j] * unit          # cyclictest's own max, even when beyond the histogram
        assert c.hist.range_max_ns == (len(cols[j]) - 1) * unit
        assert c.hist.to_buckets() == [[k * unit, k * unit, v] for k, v in enumerate(cols[j]) if v]
        s = summarize_cpu(c)
        for field, q in (("p50_ns", 50), ("p99_ns", 99), ("p999_ns", 99.9)):
            assert getattr(s, field) == expected_percentile(cols[j], overflow[j], q, unit), (j, field)
        if overflow[j]:
            assert c.max_ns > c.hist.range_max_ns
    assert r.engine == "import" and r.state == "complete" and r.config["resolution_ns"] == unit
    assert r.source == {"file": name, "sha256": hashlib.sha256((GOLDEN / name).read_bytes()).hexdigest(),
                        "format": "cyclictest-histofall" if name == "histofall.txt" else "cyclictest-histogram",
                        "start_time_from": "mtime"}   # the file states none: its mtime is taken, and said
    assert (store.run_dir(r.run_id) / "raw" / name).read_bytes() == (GOLDEN / name).read_bytes()
    assert store.load(r.run_id).to_dict() == r.to_dict()


def test_an_overflowing_histogram_keeps_the_tail_unknown(store):
    """hist.txt lost more than 1 % of thread 0's samples: its p99 must be '> range'."""
    text = (GOLDEN / "hist.txt").read_text()
    total, overflow = footer(text, "Total"), footer(text, "Histogram Overflows")
    lossy = [j for j in range(len(total)) if overflow[j] > 0.01 * (total[j] + overflow[j])]
    assert lossy, "regenerate hist.txt: no thread lost over 1 % of its samples"
    r = import_file(GOLDEN / "hist.txt", store)
    for j in lossy:
        assert summarize_cpu(r.cpus[j]).p99_ns is None
    assert any("fell beyond" in w for w in r.warnings)


def test_histofall_total_column_is_the_whole_run(store):
    text = (GOLDEN / "histofall.txt").read_text()
    n = len(footer(text, "Min Latencies"))
    assert len(columns(text)) == n + 1
    r = import_file(GOLDEN / "histofall.txt", store)
    assert len(r.cpus) == n
    whole = summarize_all(r)
    assert whole.count == footer(text, "Total")[n] + footer(text, "Histogram Overflows")[n]
    assert whole.max_ns == footer(text, "Max Latencies")[n] * US
    assert whole.overflow == footer(text, "Histogram Overflows")[n]


def test_spike_lines_become_top_spikes(store):
    text = (GOLDEN / "spike.txt").read_text()
    lines = [tuple(map(int, m)) for m in re.findall(r"^T:\s*(\d+) Spike:\s*(\d+): TS:\s*(\d+)$", text, re.M)]
    assert lines and len(lines) == int(re.search(r"^spikes = (\d+)$", text, re.M)[1])
    r = import_file(GOLDEN / "spike.txt", store)
    assert sorted(r.top_spikes, key=lambda s: (-s[2], s[1])) == \
        sorted(([t, ts * 1000, lat * 1000] for t, lat, ts in lines), key=lambda s: (-s[2], s[1]))[:100]
    assert r.top_spikes[0][2] == max(lat for _, lat, _ in lines) * 1000
    for c in r.cpus:
        assert c.spikes == sum(1 for t, _, _ in lines if t == c.cpu)


def test_break_is_reported_with_its_thread_and_value(store):
    text = (GOLDEN / "break.txt").read_text()
    tids = [int(v) for v in re.search(r"^# Thread Ids:(.*)$", text, re.M)[1].split()]
    thread = tids.index(int(re.search(r"^# Break thread: (\d+)$", text, re.M)[1]))
    value = int(re.search(r"^# Break value: (\d+)$", text, re.M)[1])
    r = import_file(GOLDEN / "break.txt", store)
    [w] = [w for w in r.warnings if "-b (break trace)" in w]
    assert f"thread {thread} woke {value:,} µs late" in w
    assert r.cpus[thread].max_ns >= value * US


@pytest.mark.parametrize("name", ["nsecs.txt", "run-nsecs.txt", "summary-nsecs.txt", "run-nsecs.json"])
def test_nsecs_runs_are_read_in_ns_and_say_so(name, store):
    r = import_file(GOLDEN / name, store)
    assert r.config["resolution_ns"] == NS
    assert any("nanoseconds (cyclictest -N" in w for w in r.warnings)
    if name != "summary-nsecs.txt":  # with a histogram, every sample overflowed its 1 ns buckets
        assert all(c.hist.overflow == c.count and c.hist.range_max_ns < 1000 for c in r.cpus)
        assert not any("--histogram-us" in w for w in r.warnings)


@pytest.mark.parametrize("name", SUMMARY_FILES)
def test_summary_lines_without_histogram(name, store):
    text = (GOLDEN / name).read_text()
    unit = SUMMARY_FILES[name]
    last = statuses(text)
    r = import_file(GOLDEN / name, store)
    assert r.source["format"] == "cyclictest-summary"
    assert [c.cpu for c in r.cpus] == sorted(last)
    for c in r.cpus:
        s = last[c.cpu]
        assert (c.count, c.min_ns, c.max_ns) == (s["cycles"], s["min"] * unit, s["max"] * unit)
        assert summarize_cpu(c).avg_ns == s["avg"] * unit
        assert c.hist.overflow == c.count and c.hist.range_max_ns == -1
        assert summarize_cpu(c).p50_ns is None
    assert r.config["interval_us"] == last[0]["interval"] and r.config["priority"] == last[0]["prio"]
    assert any("no histogram" in w for w in r.warnings)


def test_non_quiet_output_really_has_escapes_and_is_read_through_them(store):
    raw = (GOLDEN / "summary-tty.txt").read_text()
    assert "\x1b[" in raw and raw.count("T: 0 (") > 10
    r = import_file(GOLDEN / "summary-tty.txt", store)
    assert r.config["policy"] == "fifo"
    assert r.cpus[0].count == statuses(raw)[0]["cycles"]


@pytest.mark.parametrize("name", ["run.json", "run-nsecs.json", "run-nohist.json"])
def test_json_matches_the_text_of_the_same_run(name, store):
    doc = json.loads((GOLDEN / name).read_text())
    text = (GOLDEN / name.replace(".json", ".txt")).read_text()
    unit = NS if doc["resolution_in_ns"] else US
    r = import_file(GOLDEN / name, store)
    if "# Histogram" in text:
        total, overflow = footer(text, "Total"), footer(text, "Histogram Overflows")
        expect = [(t + o, lo * unit, hi * unit, o) for t, o, lo, hi in
                  zip(total, overflow, footer(text, "Min Latencies"), footer(text, "Max Latencies"))]
    else:
        expect = [(s["cycles"], s["min"] * unit, s["max"] * unit, s["cycles"])
                  for _, s in sorted(statuses(text).items())]
    assert [(c.count, c.min_ns, c.max_ns, c.hist.overflow) for c in r.cpus] == expect
    assert [c.cpu for c in r.cpus] == [t["cpu"] for _, t in sorted(doc["thread"].items())]
    info = doc["sysinfo"]
    assert (r.system["kernel_release"], r.system["kernel_version"], r.system["machine"], r.system["hostname"]) == \
        (info["release"], info["version"], info["machine"], info["nodename"])
    assert (r.system["preempt_model"] == "rt") == (info["realtime"] == 1 or "PREEMPT_RT" in info["version"])
    assert r.host == info["nodename"]
    cmdline = doc["cmdline:"]
    assert r.source["command_line"] == cmdline and r.reproducer is None and r.engine_argv == []  # shown, never run
    assert r.config["interval_us"] == int(re.search(r"-i ?(\d+)", cmdline)[1])
    assert r.config["priority"] == int(re.search(r"-p ?(\d+)", cmdline)[1])
    assert r.config["rt_tests_version"] == doc["rt_test_version:"]
    assert r.source["format"] == "cyclictest-json"


def test_json_key_spellings_without_colon_are_accepted(tmp_path, store):
    doc = json.loads((GOLDEN / "run.json").read_text())
    assert "cmdline:" in doc and "rt_test_version:" in doc  # what rt-tests 2.40 writes
    plain = {k.rstrip(":"): v for k, v in doc.items()}
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(plain, indent=2))
    a, b = import_file(GOLDEN / "run.json", store), import_file(path, store)
    assert (b.config, b.source["command_line"]) == (a.config, a.source["command_line"])
    assert [c.to_dict() for c in b.cpus] == [c.to_dict() for c in a.cpus]


@pytest.mark.parametrize("csv_name,text_name", [("recipe.csv", "hist.txt"), ("recipe-histofall.csv", "histofall.txt"),
                                                ("recipe-tty.csv", "hist-tty.txt")])
def test_recipe_csv_keeps_the_histogram_and_admits_what_it_lost(csv_name, text_name, store):
    text = (GOLDEN / text_name).read_text()
    n = len(footer(text, "Min Latencies"))
    total, mins = footer(text, "Total"), footer(text, "Min Latencies")
    cols = columns(text)[:n]
    r = import_file(GOLDEN / csv_name, store)
    assert r.source["format"] == "cyclictest-csv"
    assert len(r.cpus) == n
    for j, c in enumerate(r.cpus):
        assert c.count == total[j]
        assert c.hist.to_buckets() == [[k * US, k * US, v] for k, v in enumerate(cols[j]) if v]
        assert c.max_ns is None  # cyclictest's max was in a '#' line that grep removed
        assert c.min_ns == mins[j] * US
    assert any("keeps only the histogram" in w for w in r.warnings)


def test_recipe_artefacts_are_what_the_tools_made(tmp_path, store):
    """The sed header typed with '\\n' leaves an empty second line; stray
    spaces or commas at a row's start (hand-edited headers) are tolerated."""
    assert (GOLDEN / "recipe-histofall.csv").read_text().splitlines()[1] == ""
    lines = (GOLDEN / "recipe.csv").read_text().splitlines()
    reference = import_file(GOLDEN / "recipe.csv", store)
    for i, variant in enumerate([[lines[0], " " + lines[1]] + lines[2:], [lines[0], "," + lines[1]] + lines[2:],
                                 lines[1:], [" " + lines[0]] + lines[1:]]):
        path = tmp_path / f"v{i}.csv"
        path.write_text("\r\n".join(variant) + "\r\n")
        r = import_file(path, store)
        assert [c.to_dict() for c in r.cpus] == [c.to_dict() for c in reference.cpus]


def test_a_sched_other_run_is_read_with_its_policy(store):
    """'policy: other/other: loadavg' (rt-tests 1.x and later, no -p): its status lines are the truth."""
    text = (GOLDEN / "other.txt").read_text()
    assert "policy: other/other:" in text
    last = statuses(text)
    r = import_file(GOLDEN / "other.txt", store)
    assert r.config["policy"] == "other" and r.config["priority"] == 0 == last[0]["prio"]
    assert [(c.count, c.max_ns) for c in r.cpus] == [(last[t]["cycles"], last[t]["max"] * US) for t in sorted(last)]
    assert r.config["cpu_is_thread"]          # no -a: T: n is a thread, not a CPU


def test_the_summary_lines_alone_keep_every_figure_they_state(store):
    """'# Histogram' directly followed by '# Total:' ...: the grep '^#' of a -h output."""
    text = (GOLDEN / "summary-lines.txt").read_text()
    total, over = footer(text, "Total"), footer(text, "Histogram Overflows")
    r = import_file(GOLDEN / "summary-lines.txt", store)
    assert r.source["format"] == "cyclictest-summary-lines"
    assert [c.count for c in r.cpus] == [t + o for t, o in zip(total, over)]
    assert [c.max_ns for c in r.cpus] == [m * US for m in footer(text, "Max Latencies")]
    assert [c.min_ns for c in r.cpus] == [m * US for m in footer(text, "Min Latencies")]
    assert [summarize_cpu(c).avg_ns for c in r.cpus] == [a * US for a in footer(text, "Avg Latencies")]
    assert all(summarize_cpu(c).p99_ns is None for c in r.cpus)
    assert any("histogram's rows are not in this file" in w for w in r.warnings)


def test_a_saved_session_s_command_line_names_the_cpus_and_the_range(store):
    text = (GOLDEN / "session.txt").read_text()
    cmd = re.search(r"# (cyclictest .*)$", text.splitlines()[0])[1]
    pinned = int(re.search(r"-a (\d+)", cmd)[1])
    size = int(re.search(r"-h (\d+)", cmd)[1])
    r = import_file(GOLDEN / "session.txt", store)
    assert [c.cpu for c in r.cpus] == [pinned] and not r.config.get("cpu_is_thread")
    assert r.config["histogram_us"] == size and r.cpus[0].hist.range_max_ns == (size - 1) * US
    assert r.source["command_line"] == cmd and r.reproducer is None   # the file's, never a command to rerun


def test_a_sparse_output_takes_its_range_from_the_command_line(tmp_path, store):
    """rt-tests 2.x prints only the non-empty rows: the last row is not the range, -h is.  The
    command line is the one cyclictest wrote into the --json of the same run."""
    corpus = Path(__file__).parents[2] / "corpus" / "cyclictest"
    src = corpus / "neurorust-h400-rt280-6t.hist"
    cmd = json.loads((corpus / "neurorust-json-rt280-6t.json").read_text())["cmdline:"]
    size = int(re.search(r"--histogram=(\d+)", cmd)[1])
    last_row = max(int(line.split()[0]) for line in src.read_text().splitlines() if re.match(r"\d{6}\s", line))
    bare = import_file(src, store)
    assert "histogram_us" not in bare.config and last_row < size - 1
    assert all(c.hist.range_max_ns == last_row * US for c in bare.cpus)   # all that the rows tell
    with_cmd = tmp_path / "with-cmd.hist"
    with_cmd.write_text(f"running cmd: {cmd}\n" + src.read_text())
    r = import_file(with_cmd, store)
    assert r.config["histogram_us"] == size
    assert all(c.hist.range_max_ns == (size - 1) * US for c in r.cpus)
    pinned = re.search(r"--affinity=(\d+)-(\d+)", cmd)
    assert [c.cpu for c in r.cpus] == list(range(int(pinned[1]), int(pinned[2]) + 1))


def verbose_values(text: str) -> dict[int, list[int]]:
    """The -v lines 'thread:cycle:value', as cyclictest printed them, by thread."""
    out: dict[int, list[int]] = {}
    for m in re.finditer(r"^ *(\d+): *(\d+): *(\d+)$", text, re.M):
        values = out.setdefault(int(m[1]), [])
        assert int(m[2]) == len(values)                      # cycles count up from 0
        values.append(int(m[3]))
    return out


@pytest.mark.parametrize("name", VERBOSE_FILES)
def test_verbose_output_keeps_every_wake_up(name, store):
    """cyclictest -v (a line per wake-up, after a header cyclictest 2.x starts
    with 'Max CPUs = N'): every printed value is in the histogram, and where
    -q added status lines, their maximum is the run's."""
    text = (GOLDEN / name).read_text()
    unit = VERBOSE_FILES[name]
    r = import_file(GOLDEN / name, store)
    assert r.source["format"] == "cyclictest-verbose"
    values, status = verbose_values(text), statuses(text)
    pinned = {int(t): int(c) for t, c in re.findall(r"^Thread (\d+) using cpu (\d+)\.$", text, re.M)}
    assert [c.cpu for c in r.cpus] == [pinned[t] for t in sorted(values)]
    for c, t in zip(r.cpus, sorted(values)):
        got = np.repeat(c.hist.lo_ns, c.hist.count)
        printed = np.sort(np.asarray(values[t]) * unit)
        if t in status and status[t]["max"] * unit > printed.max():   # the worst was not printed: the status says it
            printed = np.append(printed, status[t]["max"] * unit)
        assert np.array_equal(got, printed) and c.count == len(printed) and c.hist.overflow == 0
        assert c.max_ns == (status[t]["max"] * unit if t in status else printed.max())
        if t in status:
            assert c.count <= status[t]["cycles"]
    if status:
        assert r.config["interval_us"] == status[0]["interval"] and r.config["priority"] == status[0]["prio"]
        unprinted = [t for t in status if status[t]["cycles"] > len(values[t])]
        assert all(any(f"wake-ups of thread {t} but printed" in w for w in r.warnings) for t in unprinted)
    else:  # 'Thread N Interval:' prints the next thread's interval (-d adds 500 µs per thread)
        printed_iv = [int(v) for v in re.findall(r"^Thread \d+ Interval: (\d+)$", text, re.M)]
        step = printed_iv[1] - printed_iv[0]
        assert r.config["thread_intervals_us"] == [v - step for v in printed_iv]
    assert (unit == NS) == any("nanoseconds" in w for w in r.warnings)
