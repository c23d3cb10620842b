"""Parsing what the user typed: durations, CPU lists, the reproducer."""

from __future__ import annotations

import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtforge.errors import UserError
from rtforge.measure.spec import (
    LIMITS,
    MAX_CPUS,
    LatencySpec,
    format_cpu_list,
    format_duration,
    parse_cpu_list,
    parse_duration,
    parse_int,
    parse_number,
)


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("10m", 600), ("2h", 7200), ("1h30m", 5400), ("1.5h", 5400),
    ("1d", 86400), (" 5M ", 300), ("1h0m1s", 3601),
    # as rtforge prints a length ("10 s"), so it is typed back
    ("5 s", 5), ("5 m", 300), ("10 min", 600), ("1 h 30 min", 5400), ("1h 30m", 5400),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["90", "", "abc", "10x", "-5", "5 sec", "5  s", "m", "1h-2m", "0", "0.4s", "101d",
                                  "２s", "1e3", "1_0", "9" * 400, "nan", "inf"])
def test_bad_durations(text):
    with pytest.raises(UserError):
        parse_duration(text)


@given(st.integers(1, 100 * 86400))
@settings(deadline=None)  # a loaded CI host may stall an example past 200 ms
def test_duration_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.sets(st.integers(0, 511), min_size=1))
@settings(deadline=None)  # a loaded CI host may stall an example past 200 ms
def test_cpu_list_round_trip(cpus):
    cpus = sorted(cpus)
    text = format_cpu_list(cpus)
    assert parse_cpu_list(text) == cpus
    assert "," not in text or all(part for part in text.split(","))


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "3-1", "1,,2", "1;2"])
def test_bad_cpu_lists(text):
    with pytest.raises(UserError, match="is not a CPU list"):
        parse_cpu_list(text)


def test_reproducer_quotes_hostile_labels():
    spec = LatencySpec(duration_s=600, cpus=[0, 1, 2, 3], loads=["cpu", "net"], label="a'; rm -rf / #")
    argv = shlex.split(spec.reproducer())
    assert argv[argv.index("--label") + 1] == "a'; rm -rf / #"
    assert argv[:4] == ["rtforge", "latency", "--duration", "10m"]
    assert argv[argv.index("--cpus") + 1] == "0-3"


def test_cyclictest_histogram_is_sized_from_the_interval():
    assert LatencySpec(interval_us=200).cyclictest_histogram_us == 2000
    assert LatencySpec(interval_us=50).cyclictest_histogram_us == 1000
    assert LatencySpec(interval_us=200, histogram_us=400).cyclictest_histogram_us == 400


def test_a_huge_cpu_range_is_refused_before_it_is_expanded():
    """Issue 11 item 2: 0-99999999999 used to fill the memory."""
    import time

    t0 = time.monotonic()
    with pytest.raises(UserError, match=r"CPU 1024-99999999999 does not exist"):
        parse_cpu_list("0-99999999999")
    with pytest.raises(UserError, match=r"CPU 2-99999999999 is not available here: this machine's CPUs are 0-1"):
        parse_cpu_list("0-99999999999", {0, 1})
    with pytest.raises(UserError, match=r"CPU 3,5-7 is not available on pi: its CPUs are 0-2,4"):
        parse_cpu_list("0-7", {0, 1, 2, 4}, "on pi", "its")
    assert time.monotonic() - t0 < 5  # expanding the range would take minutes and gigabytes
    assert parse_cpu_list(f"0-{MAX_CPUS - 1}") == list(range(MAX_CPUS))


@pytest.mark.parametrize("name, option", [("loops", "--loops"), ("interval_us", "--interval-us"),
                                          ("priority", "--priority"), ("histogram_us", "--histogram-us")])
def test_whole_numbers_keep_the_engines_bounds(name, option):
    lo, hi, _ = LIMITS[name]
    assert parse_int(option, str(lo), name) == lo and parse_int(option, str(hi), name) == hi
    for bad in (str(lo - 1), str(hi + 1), "１０", "1_0", "0x10", "1e3", "", " ", "nan"):
        with pytest.raises(UserError, match=option):
            parse_int(option, bad, name)


@given(st.text(max_size=20))
@settings(deadline=None)  # a loaded CI host may stall an example past 200 ms
def test_numbers_are_ascii_decimals_within_bounds_or_refused(text):
    try:
        value = parse_number("--spike-us", text, "spike_us")
    except UserError as e:
        assert str(e).startswith("--spike-us") and "\n" not in str(e)
    else:
        assert set(text.strip()) <= set("0123456789.") and 0 <= value <= LIMITS["spike_us"][1]


def test_the_spec_checks_library_callers_too():
    for spec, says in ((LatencySpec(spike_us=float("nan")), "--spike-us must be a number"),
                       (LatencySpec(spike_us=1e300), "--spike-us 1e+300 is out of range"),
                       (LatencySpec(duration_s=101 * 86400), "--duration 8.7264e+06 is out of range"),
                       (LatencySpec(loops=2**40), "--loops 1.09951e+12 is out of range"),
                       (LatencySpec(cpus=[]), "--cpus is empty"),
                       (LatencySpec(engine="cyclictest", phase="spread"), "has no --phase spread")):
        with pytest.raises(UserError, match=re.escape(says)):
            spec.validate()


def test_probe_bounds_are_the_probes_own(probe, tmp_path):
    """The limits rtforge checks are the ones the probe accepts: the highest
    passes the probe's own parser, one more is refused by it too."""
    from ...conftest import run_probe

    for option, name in (("--interval-us", "interval_us"), ("--priority", "priority")):
        lo, hi, _ = LIMITS[name]
        for value, ok in ((lo, True), (hi, True), (lo - 1, False), (hi + 1, False)):
            r = run_probe(probe, "--check", option, value) if option == "--priority" else \
                run_probe(probe, "--out", tmp_path / "x", option, value, "--loops", 1, "--check")
            assert (r.returncode != 2) == ok, (option, value, r.stderr)
    hi = int(LIMITS["duration_s"][1])
    assert run_probe(probe, "--check", "--duration-s", hi).returncode != 2
    assert run_probe(probe, "--check", "--duration-s", hi + 1).returncode == 2
