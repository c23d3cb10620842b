"""The ratios of `rtforge compare` and the report's comparison, on runs whose
numbers are written here."""

from __future__ import annotations

from rtforge.report.compare import compare_runs

from ...support.runs import run, us_cpu


def test_a_ratio_near_one_says_which_way_it_goes():
    """'max 1.0× lower' says nothing: 104 µs against 100 µs is 1.04× lower."""
    first = run([us_cpu(0, {20: 1000, 104: 1})], label="a")
    second = run([us_cpu(0, {20: 1000, 100: 1})], label="b", run_id="20260101-000000-pi-0002")
    versus = compare_runs([first, second])[1]["versus_first"]
    assert "max 1.04× lower" in versus, versus
    same = run([us_cpu(0, {20: 1000, 104: 1})], label="c", run_id="20260101-000000-pi-0003")
    assert "max same" in compare_runs([first, same])[1]["versus_first"]
