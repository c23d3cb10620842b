"""Parsing what the user typed: durations, CPU lists, the reproducer."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtforge.errors import UserError
from rtforge.measure.spec import (LatencySpec, format_cpu_list, format_duration, parse_cpu_list,
                                  parse_duration)


@pytest.mark.parametrize("text, seconds", [
    ("90", 90), ("90s", 90), ("10m", 600), ("2h", 7200), ("1h30m", 5400), ("1.5h", 5400),
    ("1d", 86400), (" 5M ", 300), ("1h0m1s", 3601),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5", "5 m", "m", "1h-2m", "0", "0.4s"])
def test_bad_durations(text):
    with pytest.raises(UserError):
        parse_duration(text)


@given(st.integers(1, 10 * 86400))
def test_duration_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.sets(st.integers(0, 511), min_size=1))
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
