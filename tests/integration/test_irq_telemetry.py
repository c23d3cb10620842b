"""The probe's per-second series records the interrupts each measured CPU
took (/proc/interrupts deltas) and the CPU use of the irq/ threads
(/proc/PID/stat): on this machine for real, and on a /proc fixture tree
whose counters a test thread moves while the probe runs."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.stats import irq_summary

from ..conftest import run_probe


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "series.jsonl").read_text().splitlines()]


def _interrupts_per_cpu() -> dict[int, int]:
    lines = Path("/proc/interrupts").read_text().splitlines()
    cols = [int(c[3:]) for c in lines[0].split()]
    totals = dict.fromkeys(cols, 0)
    for line in lines[1:]:
        fields = line.split(":", 1)[1].split()
        if len(fields) >= len(cols) and all(f.isdigit() for f in fields[:len(cols)]):
            for cpu, f in zip(cols, fields):
                totals[cpu] += int(f)
    return totals


@pytest.mark.slow
def test_series_counts_this_machines_interrupts(probe, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    before = _interrupts_per_cpu()
    out = tmp_path / "run"
    r = run_probe(probe, "--out", out, "--duration-s", 4, "--interval-us", 1000,
                  "--cpus", ",".join(map(str, cpus)))
    after = _interrupts_per_cpu()
    assert r.returncode == 0, r.stderr
    rows = _rows(out)
    middle = [row for row in rows[1:-1] if row["irqs"] is not None]
    assert len(middle) >= 2
    for i, cpu in enumerate(cpus):
        taken = sum(row["irqs"][i] for row in rows if row["irqs"] is not None)
        assert 0 < taken <= after[cpu] - before[cpu]
        for row in middle:  # each wake-up is a timer interrupt on its CPU
            assert row["irqs"][i] >= row["count"][i] // 2, (cpu, row)
    for row in middle:
        assert row["irq_thread_pct"] is not None and row["irq_thread_pct"] >= 0
        assert (row["irq_thread_top"] is None) == (row["irq_thread_top_pct"] == 0)
    assert rows[-1]["irqs"] is None or len(rows[-1]["irqs"]) == len(cpus)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # the probe never reads half a file


def _stat(pid: int, comm: str, ticks: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    return f"{pid} ({comm}) S 2 0 0 0 -1 2129984 0 0 0 0 {ticks} {ticks // 3} 0 0 -51 0 1 0 42 0 0\n"


@pytest.mark.slow
def test_irq_threads_cpu_use_and_busiest_from_a_moving_proc_tree(probe, tmp_path):
    root = tmp_path / "sysroot"
    _write(root / "sys/devices/system/cpu/online", "0-3\n")
    hz = os.sysconf("SC_CLK_TCK")
    state = {"cpu1": 0, "ticks": 0}

    def interrupts() -> str:
        return ("           CPU0       CPU1       CPU2       CPU3\n"
                f" 38:         10 {state['cpu1']:10d}          0          0  GICv2  158 Level  mmc1\n"
                "IPI0:          5          6          7          8  Rescheduling interrupts\n"
                "Err:          0\n")

    def tick() -> None:
        _write(root / "proc/interrupts", interrupts())
        # irq/38-mmc1 runs all the time (utime + stime = hz a second), the ACPI one never;
        # a kworker's time is not an irq thread's
        _write(root / "proc/50/stat", _stat(50, "irq/38-mmc1", state["ticks"] * 3 // 4))
        _write(root / "proc/51/stat", _stat(51, "irq/24-ACPI:Ged", 0))
        _write(root / "proc/52/stat", _stat(52, "kworker/1:2-events", state["ticks"] * 9))

    tick()
    stop = threading.Event()

    def move() -> None:
        # by the clock, not by steps: a stalled step on a busy host must not
        # change the rates the probe sees
        t0 = time.monotonic()
        while not stop.wait(0.05):
            elapsed = time.monotonic() - t0
            state["cpu1"] = int(2000 * elapsed)   # 2000 interrupts a second on CPU 1
            state["ticks"] = int(hz * elapsed)    # utime grows by 3/4 of it, stime by 1/4: one CPU
            tick()

    mover = threading.Thread(target=move)
    mover.start()
    try:
        out = tmp_path / "run"
        r = run_probe(probe, "--out", out, "--duration-s", 5, "--interval-us", 1000, "--cpus", "0,1",
                      "--sysroot", root)
    finally:
        stop.set()
        mover.join()
    assert r.returncode == 0, r.stderr
    middle = [row for row in _rows(out)[1:-1] if row["irqs"] is not None]
    assert len(middle) >= 3
    for row in middle:
        assert row["irqs"][0] == 0
        assert 1400 <= row["irqs"][1] <= 2600, row
        assert row["irq_thread_top"] == "irq/38-mmc1"
        assert 60 <= row["irq_thread_pct"] <= 140 and row["irq_thread_top_pct"] == row["irq_thread_pct"], row


@pytest.mark.slow
def test_a_stored_run_keeps_the_interrupt_series(tmp_path, capsys):
    rd = ["--results-dir", str(tmp_path / "results")]
    assert main(["latency", "--duration", "3s", "--cpus", "0", "--json", *rd]) == 0
    capsys.readouterr()
    from rtforge.results.store.runstore import Store

    store = Store(tmp_path / "results")
    s = store.load(store.resolve("last")).series
    assert len(s["irqs"]) == 1 and len(s["irqs"][0]) == len(s["t_s"])
    assert any(v for v in s["irqs"][0] if v)
    assert len(s["irq_thread_pct"]) == len(s["t_s"]) == len(s["irq_thread_top"])
    assert main(["show", "last", *rd]) == 0
    out = capsys.readouterr().out
    # the probe counts a second's interrupts when the next begins: the second the run ended in has none,
    # and the worst wake-up can fall in it (as in one CI run); which case this run is comes from its series
    worst = max(range(len(s["t_s"])), key=lambda k: s["max_ns"][0][k] or -1)
    if s["irqs"][0][worst] is None:
        assert worst == len(s["t_s"]) - 1
        assert re.search(r"interrupts: not counted in the second of its worst wake-up \([0-9]+ s: the run ended "
                         r"in it\); CPU 0's median second [0-9,]+", out), out
    else:
        assert re.search(r"interrupts: CPU 0 took [0-9,]+ in the second of its worst wake-up \([0-9]+ s; its "
                         r"median second [0-9,]+\) · irq threads then [0-9.]+ % of a CPU", out), out
    assert main(["show", "last", "--json", *rd]) == 0
    summary = json.loads(capsys.readouterr().out)["interrupts"]
    assert summary["cpu"] == 0 and summary["irqs_median"] > 0
    assert summary["irqs"] == s["irqs"][0][worst]   # None in the uncounted second
    # the timeline draws exactly the stored counts under the latency panel
    from rtforge.report.plots import timeline

    fig = timeline(store.load(store.resolve("last")))
    irq_ax = next(a for a in fig.axes if a.get_ylabel() == "interrupts per second")
    drawn = irq_ax.get_lines()[0].get_ydata()
    # every whole second; a last second with under 90 % of its wake-ups is cut short and left out
    expected_per_s = 1e6 / store.load(store.resolve("last")).config["interval_us"]
    whole = s["irqs"][0] if s["count"][0][-1] >= 0.9 * expected_per_s else s["irqs"][0][:-1]
    assert [None if v != v else int(v) for v in drawn] == whole
    assert main(["report", "last", "-o", str(tmp_path / "r.html"), *rd]) == 0
    assert "interrupts per second" in (tmp_path / "r.html").read_text()


def test_the_timeline_draws_the_irq_burst_under_the_spike():
    from rtforge.report.plots import render, timeline
    from rtforge.results.model import RunResult

    n, burst = 40, 23
    irqs = [[1000] * n, [1200] * n]
    irqs[1][burst] = 48_000
    pct = [1.0] * n
    pct[burst] = 87.0
    max_ns = [[20_000] * n, [21_000] * n]
    max_ns[1][burst] = 410_000
    run = RunResult(run_id="x", engine="probe", state="complete", host="h", start_time="2026-01-01T00:00:00+00:00",
                    duration_s=float(n), config={"settle_s": 0},
                    series={"t_s": list(range(n)), "cpus": [0, 1], "count": [[1000] * n] * 2, "max_ns": max_ns,
                            "overruns": [[0] * n] * 2, "irqs": irqs, "irq_thread_pct": pct,
                            "irq_thread_top": [None] * n, "irq_thread_top_pct": [None] * n})
    fig = timeline(run)
    top, irq_ax = fig.axes[0], fig.axes[1]
    assert irq_ax.get_ylabel() == "interrupts per second"
    spike_t = [line.get_xdata()[line.get_ydata().argmax()] for line in top.get_lines()]
    burst_t = [line.get_xdata()[line.get_ydata().argmax()] for line in irq_ax.get_lines()]
    assert spike_t[1] == burst_t[1] == burst  # the burst sits under the spike, on the shared time axis
    assert list(irq_ax.get_lines()[1].get_ydata()) == irqs[1]
    assert top.get_lines()[1].get_linewidth() > top.get_lines()[0].get_linewidth()  # the worst CPU stands out
    assert irq_ax.get_lines()[1].get_linewidth() > irq_ax.get_lines()[0].get_linewidth()  # in both panels
    twin = next(a for a in fig.axes if a.get_ylabel() == "irq/ threads' CPU (%)")
    assert max(twin.get_lines()[0].get_ydata()) == 87.0
    assert "interrupts per second" in render(fig, "svg").decode()
    # a run without the interrupt series (an older probe, cyclictest) keeps the two panels
    old = RunResult(**{**run.__dict__, "series": {k: v for k, v in run.series.items() if not k.startswith("irq")}})
    # and draws no empty panel for the telemetry it does not have
    assert [a.get_ylabel() for a in timeline(old).axes] == ["max latency per second (µs)"]


def test_irq_summary_points_at_the_worst_second():
    series = {"t_s": [0, 1, 2, 3], "cpus": [2, 5],
              "max_ns": [[10, 12, 11, 10], [9, 9, 95_000, None]],
              "irqs": [[1000, 1001, 1002, 1000], [1000, 1004, 9000, None]],
              "irq_thread_pct": [0.5, 0.0, 41.0, None], "irq_thread_top": [None, None, "irq/38-mmc1", None],
              "irq_thread_top_pct": [0.5, 0.0, 40.0, None]}
    s = irq_summary(series)
    assert (s["cpu"], s["t_s"], s["irqs"], s["irqs_median"]) == (5, 2, 9000, 1004)
    assert (s["irq_thread_pct"], s["irq_thread_top"], s["irq_thread_max_pct"]) == (41.0, "irq/38-mmc1", 41.0)
    assert irq_summary({**series, "irqs": None}) is None  # a run from before the interrupt series
    assert irq_summary(None) is None


def test_show_says_when_the_worst_second_was_not_counted():
    """The worst wake-up in the second the run ended in (no interrupt count:
    the probe takes it when the next second begins) keeps a line that says so."""
    from rtforge.cli.render import irq_line
    from rtforge.results.model import RunResult

    series = {"t_s": [0, 1, 2, 3], "cpus": [0, 1], "count": [[5000, 5000, 5000, 40]] * 2,
              "max_ns": [[10, 12, 11, 10], [9, 9, 12, 95_000]],
              "irqs": [[1000, 1001, 1002, None], [1000, 1004, 1003, None]],
              "irq_thread_pct": [0.5, 0.0, 1.0, None], "irq_thread_top": [None] * 4,
              "irq_thread_top_pct": [0.5, 0.0, 1.0, None]}
    run = RunResult(run_id="x", engine="probe", state="complete", host="h", start_time="2026-01-01T00:00:00+00:00",
                    duration_s=3.0, config={}, series=series)
    assert irq_line(run) == ("interrupts: not counted in the second of its worst wake-up (3 s: the run ended in "
                             "it); CPU 1's median second 1,003")
    # in a counted second the line gives the count, as before
    counted = RunResult(**{**run.__dict__, "series": {**series, "max_ns": [[10, 12, 11, 10], [9, 95_000, 12, 9]]}})
    assert irq_line(counted).startswith("interrupts: CPU 1 took 1,004 in the second of its worst wake-up (1 s; ")
    # no second counted at all (a run under a second): no line
    assert irq_line(RunResult(**{**run.__dict__, "series": {**series, "irqs": [[None] * 4] * 2}})) is None
