"""`rtforge latency --trace`: the target's tracer is checked before anything
starts, on this machine for real (its kernel has no timerlat tracer)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device import LocalTransport
from rtforge.errors import UserError
from rtforge.measure import trace
from rtforge.measure.spec import LatencySpec
from rtforge.results.raw import rtla_analysis


def _tracers() -> list[str]:
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        try:
            return Path(d, "available_tracers").read_text().split()
        except OSError:
            continue
    return []


HAS_TIMERLAT = "timerlat" in _tracers()


@pytest.mark.skipif(HAS_TIMERLAT, reason="this kernel has the timerlat tracer: the refusal cannot be seen here")
def test_trace_refused_here_with_the_fix(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["latency", "--trace", "--duration", "2s", "--results-dir", str(results)]) == 2
    err = capsys.readouterr().err
    assert "timerlat tracer" in err and "--fragments tracing" in err and "CONFIG_TIMERLAT_TRACER" in err
    assert err.count("\n") == 1, err  # one sentence
    assert not results.exists() or not any(results.rglob("result.json"))  # nothing was measured or stored


def test_detect_reads_this_machine():
    s = trace.detect(LocalTransport())
    assert s.tracers == _tracers() or s.tracefs is None
    assert s.rtla == (shutil.which("rtla") is not None)
    assert s.kernel and s.tracefs_known == ("tracefs" in Path("/proc/filesystems").read_text())


def _support(**kw) -> trace.TraceSupport:
    base = dict(tracefs="/sys/kernel/tracing", tracefs_known=True, tracers=["timerlat", "nop"], rtla=True,
                rtla_aa=True, kernel="6.12.0-rt")
    return trace.TraceSupport(**{**base, **kw})


@pytest.mark.parametrize("kw, words", [
    ({"tracefs": None, "tracefs_known": False}, ["no tracefs", "--fragments tracing"]),
    ({"tracefs": None}, ["could not be mounted", "mount -t tracefs"]),
    ({"tracers": ["function", "nop"]}, ["timerlat tracer", "function nop", "CONFIG_TIMERLAT_TRACER=y"]),
    ({"rtla_aa": False}, ["--aa-only", "rtla 6.1"]),
])
def test_each_missing_part_named_with_its_fix(kw, words):
    with pytest.raises(UserError) as e:
        trace.require(_support(**kw), "here", True)
    assert all(w in str(e.value) for w in words), str(e.value)
    assert "\n" not in str(e.value)


def test_not_root_is_told():
    with pytest.raises(UserError, match="needs root"):
        trace.require(_support(tracefs=None), "here", False)


def test_complete_support_passes():
    trace.require(_support(), "here", True)
    trace.require(_support(rtla=False, rtla_aa=False), "here", True)  # rtla is the tools check's


def test_missing_rtla_is_named_with_its_package():
    from rtforge.measure.target import Contact, RunSite, check_tools, tools_for

    target = RunSite(LocalTransport(), "/nonexistent", True)
    needed = tools_for("probe", [], target, trace=True)
    assert needed["rtla"] == ("rtla", None)
    contact = Contact("x86_64", "h", True, "127.0.0.1", 1, [0], tools=set(needed) - {"rtla"})
    with pytest.raises(UserError, match=r"--trace needs rtla, which is not installed: apt install rtla"):
        check_tools(needed, target, contact, False, lambda s: None)


@pytest.mark.skipif(shutil.which("rtla") is None, reason="rtla is not installed here")
def test_rtla_here_is_judged_by_its_own_help():
    """Debian 12's rtla 6.1 has no --aa-only: detect must say so from the real help text."""
    import subprocess

    r = subprocess.run(["rtla", "timerlat", "top", "--help"], capture_output=True, text=True)
    text = r.stdout + r.stderr
    assert trace.detect(LocalTransport()).rtla_aa == ("--aa-only" in text)


def test_rtla_command_from_the_run():
    spec = LatencySpec(interval_us=200, priority=90, trace=True)
    argv = trace.rtla_argv(spec.spike_threshold_ns, "0-3", spec.priority)
    assert argv[:5] == ["rtla", "timerlat", "top", "--aa-only", "100"]
    assert argv[argv.index("-P") + 1] == "f:89" and argv[argv.index("-c") + 1] == "0-3"
    assert trace.threshold_us(100_001) == 101 and trace.threshold_us(1) == 1
    assert "--trace" in spec.reproducer()


# -- the auto-analysis parser, on text in the format rtla prints (fixtures' headers say where from)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "rtla"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_parse_the_documentation_example():
    (s,) = rtla_analysis.parse(_fixture("docs-top-example.txt"))
    assert (s["cpu"], s["kind"], s["total_us"], s["irq_latency_us"]) == (23, "thread", 41.96, 28.13)
    assert s["parts"]["irq_delay"] == {"us": 27.49, "pct": 65.52}
    assert s["parts"]["irq_duration"] == {"us": 9.59, "pct": 22.85}
    assert s["parts"]["blocking"] == {"us": 3.79, "pct": 9.03}
    assert s["blocking"] == {"comm": "objtool", "pid": 49256, "us": 3.79}
    assert s["stack"][0] == "timerlat_irq" and s["stack"][-1] == "entry_SYSCALL_64_after_hwframe"
    assert len(s["stack"]) == 19
    assert rtla_analysis.interrupted_frame(s["stack"]) == "_raw_spin_unlock_irqrestore"
    assert rtla_analysis.culprit(s) == ("timer IRQ delayed 27.5 µs: IRQs off in objtool:49256 "
                                   "in _raw_spin_unlock_irqrestore")


def test_parse_thread_stop_with_interference():
    (s,) = rtla_analysis.parse(_fixture("thread-irq-interference.txt"))
    assert (s["cpu"], s["kind"], s["total_us"], s["previous_irq_us"]) == (2, "thread", 87.44, 1.48)
    assert s["blocking"] == {"comm": "stress-ng-hdd", "pid": 1873, "us": 9.31}
    assert s["interference"]["irq"] == [{"name": "mmc1", "number": 38, "us": 58.40},
                                        {"name": "arch_timer", "number": 11, "us": 3.47}]
    assert s["interference"]["thread"] == [{"name": "irq/38-mmc1", "number": 143, "us": 10.70}]
    assert rtla_analysis.interrupted_frame(s["stack"]) is None  # only the arm64 entry frames: user space ran
    assert rtla_analysis.culprit(s) == "IRQ handlers took 61.9 µs (mmc1:38 58.4 µs, arch_timer:11 3.5 µs)"
    # --dump-tasks' lines after the block are not the spike's
    assert all(i["name"] != "timerlat/2" for i in s["interference"]["irq"] + s["interference"]["thread"])


def test_parse_irq_stops_and_a_cut_off_block():
    spikes = rtla_analysis.parse(_fixture("irq-stop-two-cpus.txt"))
    assert [(s["cpu"], s["kind"], s["total_us"]) for s in spikes] == [(0, "irq", 122.29), (1, "irq", 44.86)]
    a, b = spikes
    assert a["blocking"] == {"comm": "kworker/0:1", "pid": 4211, "us": None}
    assert a["parts"]["nmi"] == {"us": 2.01, "pct": 1.64} and not a["exit_from_idle"]
    assert rtla_analysis.culprit(a) == ("timer IRQ delayed 118.0 µs: IRQs off in kworker/0:1:4211 "
                                   "in i915_gem_object_pin_pages")
    assert b["exit_from_idle"] and b["blocking"]["comm"] == "swapper/1"
    assert rtla_analysis.culprit(b) == "timer IRQ 41.8 µs late leaving idle in cpuidle_enter_state"


def test_a_breakdown_that_does_not_add_up_blames_no_one():
    """A part longer than the whole latency (a TCG guest's clock jumped: a
    79 s IRQ delay in a 1.5 s spike, seen in CI) is named as such, not read
    as "IRQs off" in whichever thread happened to be listed."""
    (s,) = rtla_analysis.parse(_fixture("docs-top-example.txt"))
    s["parts"]["irq_delay"] = {"us": 79267040.2, "pct": 5172.67}
    s["total_us"] = 1532421.07
    assert rtla_analysis.culprit(s) == ("no one to blame: rtla's breakdown does not add up (irq delay 79,267,040.2 µs "
                                   "in a 1,532,421.1 µs latency), a clock jump rather than a thread")


def test_a_negative_latency_is_read_and_blames_no_one():
    """Real rtla output from the TCG guest (CI, 2026-11-27): a 2.2 s spike
    (the probe's own figure at that moment: 2213604 µs) printed as a
    negative thread latency with negative shares.  Before, the block was
    dropped and its thread list read into the IRQ interference."""
    (s,) = rtla_analysis.parse(_fixture("negative-thread-latency.txt"))
    assert s["kind"] == "thread" and s["total_us"] == -2081686.34
    assert s["parts"]["thread"] == {"us": 799796.22, "pct": -38.42}
    assert [(t["name"], t["number"]) for t in s["interference"]["thread"]] == \
        [("rtla", 361), ("rtforge-hog", 275), ("rtprobe", 364)]
    assert {i["name"] for i in s["interference"]["irq"]} == {"local_timer"}
    assert len(s["interference"]["irq"]) == 197
    assert rtla_analysis.culprit(s) == ("no one to blame: rtla printed a negative latency (-2,081,686.3 µs), a figure "
                                   "out of its range, not a time")


def test_parse_ignores_other_output():
    assert rtla_analysis.parse("") == []
    assert rtla_analysis.parse("rtla timerlat hit stop tracing\nSaving trace to timerlat_trace.txt\n") == []
    text = _fixture("docs-top-example.txt")
    assert rtla_analysis.parse(text.replace("Thread latency", "Thread  latency")) == []  # no total: not a result


def test_read_run_times_each_spike_into_the_run(tmp_path):
    raw = tmp_path / "raw"
    (raw / "trace").mkdir(parents=True)
    (raw / "runner").mkdir()
    (raw / "runner" / "started").write_text("1000.50\n")
    (raw / "trace" / "1.out").write_text(_fixture("thread-irq-interference.txt"))
    (raw / "trace" / "2.out").write_text(_fixture("irq-stop-two-cpus.txt"))
    (raw / "trace" / "3.out").write_text("")  # stopped with the run: nothing analysed
    (raw / "trace" / "index").write_text("1 1000.40 1012.00 0\n2 1012.30 1030.75 0\n3 1031.00 1040.00 0\n")
    t = rtla_analysis.read_run(raw)
    assert t["rtla_runs"] == 3 and not t["limit_reached"]
    assert [(s["cpu"], s["t_s"]) for s in t["spikes"]] == [(2, 11.5), (0, 30.2), (1, 30.2)]
    assert t["max_idle_exit"] == {"us": 6.12, "cpu": 3}
    assert all(s["culprit"] for s in t["spikes"])
    assert rtla_analysis.read_run(tmp_path) is None  # a run without --trace


# -- the runner's rtla loop (runner.sh `trace`), for real in dash; rtla itself
# cannot run on this kernel, so a shell script stands in for it: it prints an
# rtla analysis from the fixtures, or waits for the SIGINT rtla stops on.

def _run_folder(tmp_path, limit: int, stand_in: str, cmd: list[str] | None = None) -> Path:
    from rtforge.measure.runner import runner_text

    d = tmp_path / "runs" / "r1"
    (d / "raw" / "runner").mkdir(parents=True)
    (d / "runner.sh").write_text(runner_text())
    (d / "rtla-stand-in.sh").write_text(stand_in)
    (d / "trace.cmd").write_text(trace.trace_cmd(cmd or ["sh", "./rtla-stand-in.sh"]).replace("50\n", f"{limit}\n", 1))
    return d


def test_runner_restarts_rtla_after_each_analysis_up_to_the_limit(tmp_path):
    import subprocess

    fixture = FIXTURES / "thread-irq-interference.txt"
    d = _run_folder(tmp_path, 3, f"cat '{fixture}'\n")
    r = subprocess.run(["sh", str(d / "runner.sh"), "trace", str(d)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "limit 3", r
    index = (d / "raw" / "trace" / "index").read_text().splitlines()
    assert [line.split()[0] for line in index] == ["1", "2", "3"] and all(line.split()[3] == "0" for line in index)
    assert len(rtla_analysis.read_run(d / "raw")["spikes"]) == 3


def test_runner_stops_rtla_with_sigint_and_does_not_restart(tmp_path):
    import subprocess
    import sys
    import time

    # Like rtla: set its own SIGINT handler (a background job starts with SIGINT ignored, which a
    # shell cannot trap, so the stand-in is Python), print on it.
    # It says when its handler is in place (a file), so the stop comes after that.
    ready = tmp_path / "ready"
    code = ("import signal, sys, time; "
            "signal.signal(signal.SIGINT, lambda *a: (print('stopped by INT', flush=True), sys.exit(0))); "
            f"open({str(ready)!r}, 'w').close(); time.sleep(60)")
    d = _run_folder(tmp_path, 50, "", [sys.executable, "-c", code])
    p = subprocess.Popen(["sh", str(d / "runner.sh"), "trace", str(d)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    (d / "raw" / "runner" / "trace.stop").touch()
    assert p.wait(timeout=10) == 0
    assert (d / "raw" / "trace" / "1.out").read_text() == "stopped by INT\n"
    assert not (d / "raw" / "trace" / "2.out").exists()
    assert rtla_analysis.read_run(d / "raw")["spikes"] == []


# -- show and the report: one line per traced spike, with its culprit

def _traced_run(tmp_path, capsys, irq: str = "mmc1") -> list[str]:
    """An imported run (the cyclictest golden output) given the trace of a
    run folder holding the fixtures' analyses, stored again."""
    from rtforge.results.store.runstore import Store

    golden = Path(__file__).parents[1] / "golden" / "cyclictest" / "run.json"
    rd = ["--results-dir", str(tmp_path / "results")]
    assert main(["import", str(golden), *rd]) == 0
    raw = tmp_path / "raw"
    (raw / "trace").mkdir(parents=True)
    text = _fixture("thread-irq-interference.txt").replace(" mmc1:38", f" {irq}:38")
    (raw / "trace" / "1.out").write_text(text)
    (raw / "trace" / "2.out").write_text(_fixture("irq-stop-two-cpus.txt"))
    store = Store(tmp_path / "results")
    r = store.load(store.resolve("last"))
    r.trace = rtla_analysis.read_run(raw)
    store.save(r)
    capsys.readouterr()
    return rd


def test_show_prints_one_line_per_spike_largest_first(tmp_path, capsys):
    rd = _traced_run(tmp_path, capsys)
    assert main(["show", "last", *rd]) == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("CPU ") and "latency)" in line]
    assert lines == [
        "CPU 0: 122.3 µs (irq latency) — timer IRQ delayed 118.0 µs: IRQs off in kworker/0:1:4211 "
        "in i915_gem_object_pin_pages",
        "CPU 2: 87.4 µs (thread latency) — IRQ handlers took 61.9 µs (mmc1:38 58.4 µs, arch_timer:11 3.5 µs)",
        "CPU 1: 44.9 µs (irq latency) — timer IRQ 41.8 µs late leaving idle in cpuidle_enter_state",
    ]
    assert "spikes traced by rtla timerlat: 3" in out
    assert main(["show", "last", "--json", *rd]) == 0
    assert json.loads(capsys.readouterr().out)["traced_spikes"] == [line for line in lines]


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_report_lists_the_traced_spikes(tmp_path, capsys, fmt):
    rd = _traced_run(tmp_path, capsys, irq="a|b<i>x</i>")
    out = tmp_path / f"r.{fmt}"
    assert main(["report", "last", "-o", str(out), *rd]) == 0
    text = out.read_text()
    assert "Traced spikes" in text
    assert "IRQ handlers took 61.9 µs (a|b&lt;i&gt;x&lt;/i&gt;:38 58.4 µs, arch_timer:11 3.5 µs)" in text
    assert "leaving idle in cpuidle_enter_state" in text
    assert "<i>x</i>" not in text  # an IRQ's name is text, not markup


def test_show_of_a_run_without_trace_says_nothing_of_it(tmp_path, capsys):
    golden = Path(__file__).parents[1] / "golden" / "cyclictest" / "run.json"
    rd = ["--results-dir", str(tmp_path / "results")]
    assert main(["import", str(golden), *rd]) == 0
    capsys.readouterr()
    assert main(["show", "last", *rd]) == 0
    assert "rtla" not in capsys.readouterr().out


def test_an_rtla_that_failed_is_reported(tmp_path):
    """rtla's own error (here: timerlat_top.c's err_msg when enable_timerlat
    fails) ends the loop; the result says so instead of showing no spikes."""
    raw = tmp_path / "raw"
    (raw / "trace").mkdir(parents=True)
    (raw / "trace" / "1.out").write_text(_fixture("docs-top-example.txt"))
    (raw / "trace" / "2.out").write_text("Failed to enable timerlat tracer\n")
    (raw / "trace" / "index").write_text("1 10.0 20.0 0\n2 20.1 20.5 1\n")
    t = rtla_analysis.read_run(raw)
    assert len(t["spikes"]) == 1
    assert t["failed"] == ("rtla exited with status 1 (Failed to enable timerlat tracer): "
                           "see raw/trace/2.out")


@pytest.mark.slow
def test_a_finished_run_collects_its_trace(tmp_path, capsys):
    """A real probe run here, given the trace files a --trace run's runner
    writes: finishing it stores the spikes, and an rtla failure as a warning."""
    from rtforge.measure import lifecycle
    from rtforge.results.store.runstore import Store

    rd = ["--results-dir", str(tmp_path / "results")]
    assert main(["latency", "--duration", "2s", "--cpus", "0", "--json", *rd]) == 0
    capsys.readouterr()
    store = Store(tmp_path / "results")
    r = store.load(store.resolve("last"))
    assert r.trace is None
    run_dir = tmp_path / "results" / "runs" / r.run_id
    raw = run_dir / "raw"
    started = float((raw / "runner" / "started").read_text())
    (raw / "trace").mkdir()
    (raw / "trace" / "1.out").write_text(_fixture("irq-stop-two-cpus.txt"))
    (raw / "trace" / "2.out").write_text("Failed to enable timerlat tracer\n")
    (raw / "trace" / "index").write_text(f"1 {started} {started + 1.25} 0\n2 {started + 1.3} {started + 1.4} 1\n")
    r.config["trace"] = True
    lifecycle.finish(r, run_dir)
    assert [(s["cpu"], s["t_s"]) for s in r.trace["spikes"]] == [(0, 1.2), (1, 1.2)]
    assert any(w.startswith("the trace is incomplete: rtla exited with status 1") for w in r.warnings)
