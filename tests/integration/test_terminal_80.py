"""Commands as a person sees them in an 80-column terminal (a real pty,
sized with TIOCSWINSZ): no line wider than the terminal, nothing cut with
'…', and the run ids and maxima come out whole -- the maxima as the files
themselves state them (tests/corpus/cyclictest/SOURCES.tsv), not as rtforge
computed them."""

from __future__ import annotations

import csv
import os
import re
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from rtforge.results.importers import import_file
from rtforge.results.store.runstore import Store

from ..support.procs import run_on_pty
from ..support.runs import run, us_cpu

CORPUS = Path(__file__).parents[1] / "corpus" / "cyclictest"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
FILES = {"koen-h400-4t-100M-nort.txt": "stock 4.19", "amro-h10000-3t.txt": "rt 5.10 under ping flood",
         "karthik-h400-1t-75pct-overflow.txt": None, "karthik-h400-4t-44pct-overflow.txt": None}


def stated_max_us(name: str) -> float:
    rows = {r["filename"]: r for r in csv.DictReader(open(CORPUS / "SOURCES.tsv"), delimiter="\t")}
    return max(float(v) for v in re.search(r"max_us=([0-9,]+)", rows[name]["truth_max_us_per_thread"])[1].split(","))


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("t80") / "results")
    runs = {name: import_file(CORPUS / name, store, label=label) for name, label in FILES.items()}
    return store, runs


def at_80(store: Store, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm-256color", RTFORGE_RESULTS_DIR=str(store.root))
    code, out = run_on_pty([sys.executable, "-m", "rtforge", *args], env, columns=80)
    assert code == 0, out
    text = ANSI.sub("", out).replace("\r", "")
    wide = [line for line in text.splitlines() if cell_len(line) > 80]
    assert not wide, wide
    assert "…" not in text
    return text


def test_runs_shows_whole_ids_and_maxima(imported):
    store, runs = imported
    text = at_80(store, "runs")
    for name, r in runs.items():
        assert r.run_id in text                                     # what the user types next
        assert f"{stated_max_us(name):,.1f}" in text                  # the worst case, as the file states it


def test_show_keeps_the_maximum_and_the_tail(imported):
    store, runs = imported
    name = "koen-h400-4t-100M-nort.txt"
    text = at_80(store, "show", runs[name].run_id)
    header = next(line for line in text.splitlines() if "max" in line and "p99" in line)
    assert "p99.99" in header and "max" in header
    assert f"{stated_max_us(name):,.1f}" in text and runs[name].run_id in text


def test_compare_keeps_names_maxima_and_ratios(imported):
    store, runs = imported
    text = at_80(store, "compare", "stock 4.19", "rt 5.10 under ping flood")
    assert "stock 4.19" in text and "rt 5.10 under ping flood" in text
    for name in ("koen-h400-4t-100M-nort.txt", "amro-h10000-3t.txt"):
        assert f"{stated_max_us(name):,.1f}" in text
    first, other = stated_max_us("koen-h400-4t-100M-nort.txt"), stated_max_us("amro-h10000-3t.txt")
    ratio = other / first
    assert re.search(rf"max\s+{ratio:.1f}×\s+higher", text.replace("\n", " ").replace("│", " "))


HIDDEN = re.compile(r"\(([a-z0-9., -]+): not shown at this width; a wider terminal, or --json, shows them\)")


def header_of(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if "┃" in line)
    return [c.strip() for c in line.split("┃")]


@pytest.mark.parametrize("command", [["show", "stock 4.19"], ["compare", "stock 4.19", "rt 5.10 under ping flood"]])
def test_a_narrow_table_names_the_columns_it_hid(imported, command):
    """At 80 columns show and compare dropped columns without a word; now one
    line names them and says how to see them, and a wide terminal has them."""
    store, _ = imported
    text = at_80(store, *command)
    m = HIDDEN.search(re.sub(r"\s+", " ", text))
    assert m, text
    hidden = m[1].split(", ")
    assert hidden and not set(hidden) & set(header_of(text)), (hidden, header_of(text))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm-256color", RTFORGE_RESULTS_DIR=str(store.root))
    code, wide = run_on_pty([sys.executable, "-m", "rtforge", *command], env, columns=250)
    assert code == 0 and set(hidden) <= set(header_of(ANSI.sub("", wide))) and "not shown" not in wide


def test_compare_keeps_a_partial_run_s_state_in_sight(tmp_path):
    """The partial run looked complete once its state column went."""
    store = Store(tmp_path / "results")
    store.save(run([us_cpu(0, {12: 1000, 84: 1})], label="whole", run_id="20260101-000000-pi-0001"))
    store.save(run([us_cpu(0, {12: 1000, 90: 1})], label="stopped early", run_id="20260101-000000-pi-0002",
                   state="interrupted"))
    text = at_80(store, "compare", "whole", "stopped early")
    assert "state" in header_of(text), text
    row = " ".join(line for line in text.splitlines() if "│" in line)
    assert "interrupted" in row and "(partial)" in row


def test_compare_of_long_names_keeps_every_maximum(tmp_path):
    """Import ids of over 40 characters and a label of 100: the run column
    wraps, the maxima beside it are never squeezed out."""
    store = Store(tmp_path / "results")
    label = ("a label of a hundred characters, " * 4)[:100]
    ids = [import_file(CORPUS / "koen-h400-4t-100M-nort.txt", store).run_id,
           import_file(CORPUS / "amro-h10000-3t.txt", store, label=label).run_id]
    assert len(ids[0]) > 40
    text = at_80(store, "compare", *ids)
    for name in ("koen-h400-4t-100M-nort.txt", "amro-h10000-3t.txt"):
        assert f"{stated_max_us(name):,.1f}" in text, text


def test_kernel_boards_rows_stay_short(imported):
    store, _ = imported
    text = at_80(store, "kernel", "boards")
    rows = [line for line in text.splitlines() if line.startswith(" ") and "│" in line]
    starts = [i for i, line in enumerate(rows) if line.split("│")[0].strip() and not line.lstrip().startswith("(")]
    lengths = [b - a for a, b in zip(starts, starts[1:] + [len(rows)])]
    assert starts and max(lengths) <= 4, lengths        # a board is 1-4 lines, not 6-11
    for board in ("pi1", "pi2", "pi4-32", "pi4-64", "pi5"):
        assert re.search(rf"^ {re.escape(board)}\s", text, re.M)


@pytest.fixture(scope="module")
def benched(tmp_path_factory):
    """Two real bench runs (a short solve and a second of stress-ng each) with labels that need room."""
    from rtforge.measure.bench import BenchSpec, run_bench

    store = Store(tmp_path_factory.mktemp("t80b") / "results")
    spec = dict(n=8, threads=[1, 2], repeat=2, warmup=0, stress_s=1)
    return store, [run_bench(BenchSpec(**spec, label=label), store)
                   for label in ("stock 6.1", "rt 6.12 with a label far longer than a column")]


@pytest.mark.slow
def test_a_bench_run_keeps_its_median_and_stress_ng_rate(benched):
    store, runs = benched
    text = at_80(store, "show", runs[1].run_id)
    header = next(line for line in text.splitlines() if "┃" in line)
    assert "median" in header and "threads" in header and "bogo ops/s" in header
    # the summary line above the table ends on the run's time instead of wrapping it onto a line of its own
    assert re.search(r"^N-queens N=8 · 2 solves per thread count \(\+0 warm-up\) · complete · \d+ s$", text, re.M)
    for row in runs[1].bench["stress_ng"]["runs"]:
        assert f"{row['bogo_ops_per_s']:,.0f}" in text


@pytest.mark.slow
def test_bench_compare_keeps_the_names_and_the_kernel(benched):
    store, runs = benched
    text = at_80(store, "compare", runs[0].run_id, runs[1].run_id)
    header = next(line for line in text.splitlines() if "┃" in line)
    assert "median" in header and "kernel" in header and "vs first" in header
    assert "stock 6.1" in text and os.uname().release in text
    table = " ".join(line.split("│")[0].strip() for line in text.splitlines() if "│" in line)
    assert "rt 6.12 with a label far longer than a column" in table   # wrapped, all of it there


@pytest.mark.slow
def test_runs_keeps_a_kernel_release_whole_beside_a_long_label(benched):
    """A kernel release is an identifier: the long label wraps at its spaces, the release stays on one line."""
    store, runs = benched
    text = at_80(store, "runs")
    assert os.uname().release in text, text
    assert all(r.run_id in text for r in runs)


@pytest.mark.slow
@pytest.mark.root
def test_a_runs_progress_line_leaves_nothing_glued_or_past_its_end(tmp_path):
    """The steps before the measuring were printed beside the live line (another
    console), glued onto its frame: '0:00:00checking this machine'; and the
    last frame said '3/2 s'."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm-256color", RTFORGE_RESULTS_DIR=str(tmp_path / "results"))
    code, out = run_on_pty([sys.executable, "-m", "rtforge", "latency", "--duration", "2s"], env, columns=80)
    assert code == 0, out
    text = ANSI.sub("", out)
    assert not re.search(r"\d:\d\d:\d\d[^\s…]", text), text        # the elapsed clock, then something glued to it
    frames = [(int(a), int(b)) for a, b in re.findall(r"measuring (\d+)/(\d+) s", text)]
    assert frames and all(a <= b for a, b in frames), frames



def test_show_keeps_lower_bounds_unknown_counts_and_rtla_s_other_latencies(tmp_path):
    """A CSV import's percentiles are lower bounds ('≥') and its overflow
    unknown ('?'); an rtla import says what rtla measured beside the thread
    latency: all of it whole at 80 columns."""
    store = Store(tmp_path / "results")
    csv_run = import_file(CORPUS / "civcode-blogcsv-rt.csv", store, label="csv")
    rtla = Path(__file__).parents[1] / "fixtures" / "rtla" / "import" / "hist.txt"
    rtla_run = import_file(rtla, store, label="rtla")
    text = at_80(store, "show", csv_run.run_id)
    rows = [[c.strip() for c in line.split("│")] for line in text.splitlines() if "│" in line]
    assert rows and all(any(c.startswith("≥") for c in row) and row[-1] == "?" for row in rows), text
    text = at_80(store, "show", rtla_run.run_id)
    irq_max = int(re.search(r"^max:\s+(\d+)", rtla.read_text(), re.M)[1])   # the IRQ column comes first
    assert f"rtla also measured: timer IRQ latency max {irq_max:,}.0 µs (CPU 0)" in text, text


def test_doctor_keeps_its_indentation_counts_and_units_at_80_columns(tmp_path):
    """At 80 columns doctor's wrapped lines fell to column 0, under no "why:"
    or "fix:"; it said "3 note", "14 interrupt(s)", "87 us"."""
    pi3 = Path(__file__).parents[1] / "fixtures" / "sysroot" / "pi3"
    text = at_80(Store(tmp_path / "results"), "doctor", "--sysroot", str(pi3), "--window-s", "0")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("    why: ", "    fix: ")):
            for more in lines[i + 1:]:
                if not more.startswith(" " * 9):
                    break
            assert not more or more.startswith("    ") or not more.strip(), (line, more)
    assert all(not line or line[0] == " " or re.match(r"(rtforge doctor|\d+ block|[A-Z]+)", line)
               for line in lines), [line for line in lines if line and line[0] != " "]
    assert re.search(r"^0 block RT · \d+ cost latency · \d+ notes$", text, re.M), text[:300]
    assert "(s)" not in text and not re.search(r"\d us\b", text)
    assert "14 interrupts may still land" in text.replace("\n    ", " ")


def test_doctor_keeps_a_share_with_its_percent_sign(monkeypatch):
    """'python3 1\\n%': a thread's share was split from its unit at the end of a line."""
    from rich.console import Console

    from rtforge.cli import doctor
    from rtforge.device.doctor.checks_cpu import ThreadUse
    from rtforge.device.doctor.diagnose import DoctorReport

    threads = [ThreadUse(i, name, "user", "other", 0, 0, 10, pct) for i, (name, pct) in
               enumerate([("ksoftirqd/3", 12.0), ("irq/56-mmc1", 7.0), ("rtforge-probe", 3.0), ("python3", 1.0)])]
    for width in range(60, 81):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))
        monkeypatch.setattr(doctor, "make_console", lambda c=console: c)
        doctor.render(DoctorReport("this machine", "6.12.0-rt", "#1 PREEMPT_RT", "rt", "Raspberry Pi 4", [3],
                                   2.0, [], threads=threads))
        out = console.export_text()
        assert not re.search(r"\d\s*\n\s*%", out), (width, out)
        assert all(len(line) <= width for line in out.splitlines())
