"""The one CPU-list parser (rtforge.cpulist): the kernel's grammar, and a
bound checked before any range is expanded."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtforge.cpulist import NR_CPUS_MAX, CpuListError, format_cpulist, parse_cpulist, parse_cpumask, regions, split


@pytest.mark.parametrize("text, last, cpus", [
    ("0-2,5", None, {0, 1, 2, 5}),
    (" 1,3-4 ", None, {1, 3, 4}),
    ("", None, set()),
    ("(null)", None, set()),                         # nohz_full without the option
    ("100-130:2/25", None, {100, 101, 125, 126}),    # kernel-parameters.rst: the first 2 of every 25
    ("0-7:1/2", None, {0, 2, 4, 6}),
    ("0-7:0/2", None, set()),
    ("2-N", 5, {2, 3, 4, 5}),                        # N: the last CPU
    ("N", 3, {3}),
    ("all", 3, {0, 1, 2, 3}),
    ("ALL:1/2", 5, {0, 2, 4}),                       # "all" in any case, with a pattern
    (f"0-{NR_CPUS_MAX - 1}", None, set(range(NR_CPUS_MAX))),
])
def test_the_kernels_grammar(text, last, cpus):
    assert parse_cpulist(text, last=last) == cpus


@pytest.mark.parametrize("text, message", [
    ("0-7:2", "is not a range the kernel reads: its pattern is USED/GROUP CPUs, e.g. 0-7:1/2"),
    ("3-1", "is not a valid CPU range"),
    ("0-7:3/2", "is not a valid CPU range"),         # more used than the group holds
    ("0-7:1/0", "is not a valid CPU range"),
    ("1,,2", "is not a CPU number or range"),
    ("1-", "is not a CPU number or range"),
    ("n", "is not a CPU number or range"),           # only "N" is the last CPU
    ("2-N", "names the last CPU, which is not known here"),
    ("all", "names the last CPU, which is not known here"),
    ("１", "is not a CPU number or range"),          # ASCII digits only
    ("1" * 41, "is not a CPU number or range"),
    ("0," * 40000, "is longer than one of every CPU there can be"),
])
def test_what_the_kernel_refuses_is_refused(text, message):
    with pytest.raises(CpuListError, match=message):
        parse_cpulist(text)


def test_a_huge_range_is_refused_before_it_is_expanded():
    """Issue 22 item 3: doctor's parser expanded 0-99999999999 into a set (4.5 GB, then MemoryError)."""
    t0 = time.monotonic()
    for text in ("0-99999999999", "0-99999999999:1/99999999999", f"{NR_CPUS_MAX}", "5,0-" + "9" * 38):
        with pytest.raises(CpuListError, match="the highest CPU number there can be"):
            parse_cpulist(text)
    with pytest.raises(CpuListError, match="CPU 4 is beyond 3"):
        parse_cpulist("0-4", limit=4)
    assert split(regions("0-99999999999,2"), 3, {0, 1, 3}) == ({0, 1, 3}, "2,4-99999999999")
    assert time.monotonic() - t0 < 2


@given(st.sets(st.integers(0, NR_CPUS_MAX - 1)))
@settings(deadline=None)  # a loaded CI host may stall an example past 200 ms
def test_format_and_parse_round_trip(cpus):
    text = format_cpulist(cpus)
    assert parse_cpulist(text) == cpus
    assert all(part for part in text.split(",")) or not cpus


@pytest.mark.parametrize("text, cpus", [("f", {0, 1, 2, 3}), ("00000000,0000000f", {0, 1, 2, 3}),
                                        ("1,00000000", {32}), ("0", set()), ("", set())])
def test_masks(text, cpus):
    assert parse_cpumask(text) == cpus


@pytest.mark.parametrize("text", ["zz", "0x10", "1" * (NR_CPUS_MAX // 4 + 1), "f f"])
def test_bad_masks(text):
    with pytest.raises(CpuListError, match="is not a CPU mask"):
        parse_cpumask(text)
