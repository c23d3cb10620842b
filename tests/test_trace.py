"""`rtforge latency --trace`: the target's tracer is checked before anything
starts, on this machine for real (its kernel has no timerlat tracer)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device import LocalTransport
from rtforge.errors import UserError
from rtforge.measure import trace
from rtforge.measure.spec import LatencySpec


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
    ({"rtla": False, "rtla_aa": False}, ["apt install rtla"]),
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
