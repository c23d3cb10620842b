"""The verdict rules of docs/verdict.md, each on a run whose answer is
worked out by hand from the numbers in the test."""

from __future__ import annotations

import pytest

from rtforge.errors import UserError
from rtforge.report.verdict import parse_cycle_time, verdict

from ...support.runs import run, us_cpu

MS = 1_000_000
BODY = {20: 99_000}          # 99,000 wake-ups 20 µs late


def test_pass_when_the_worst_leaves_more_than_half_the_cycle():
    r = run([us_cpu(0, {**BODY, 300: 1})])                  # worst 300 µs of a 1000 µs cycle
    v = verdict(r, 1 * MS)
    n = 99_001
    assert (v.status, v.samples, v.above) == ("pass", n, 0)
    assert v.margin == pytest.approx(1000 / 300)
    assert v.p95_bound == pytest.approx(1 - 0.05 ** (1 / n))
    assert v.p95_bound == pytest.approx(3 / n, rel=0.01)     # the rule of three
    assert "margin of 3.3×" in v.sentence and "300.0 µs" in v.sentence


def test_tight_below_a_margin_of_two_and_pass_at_exactly_two():
    r = run([us_cpu(0, {**BODY, 300: 1})])
    assert verdict(r, 500_000).status == "tight"             # 500 / 300 = 1.67
    assert verdict(r, 600_000).status == "pass"              # 600 / 300 = 2: half the cycle is still free
    assert verdict(r, 300_000).status == "tight"             # L = T is late by nothing: not a failure


def test_fail_counts_the_late_wake_ups():
    r = run([us_cpu(0, {**BODY, 1500: 2}), us_cpu(1, {**BODY, 1200: 1})])
    v = verdict(r, 1 * MS)
    assert (v.status, v.above, v.above_exact) == ("fail", 3, True)
    assert "3 of 198,003 wake-ups came later" in v.sentence and "1,500.0 µs" in v.sentence


def test_overruns_of_a_shorter_interval_do_not_fail_a_longer_cycle():
    # The case: a 200 µs interval, 55 missed periods, worst 7.6 ms.
    # Each overrun is one late wake-up, already in the latencies.
    r = run([us_cpu(0, {**BODY, 7600: 1}, overruns=55)], interval_us=200)
    v = verdict(r, 100 * MS)
    assert v.status == "pass" and v.margin == pytest.approx(100 / 7.6)
    assert verdict(r, 10 * MS).status == "tight"             # 10 / 7.6 = 1.3
    v = verdict(r, 5 * MS)                                    # 7.6 ms > 5 ms: the late wake-up fails it
    assert v.status == "fail" and v.above == 1 and "missed" not in v.sentence


def test_overruns_fail_a_cycle_no_longer_than_the_interval():
    r = run([us_cpu(0, {**BODY, 50: 1}, overruns=3)], interval_us=1000)
    v = verdict(r, 1 * MS)                                    # interval = cycle: a missed period is a missed cycle
    assert v.status == "fail" and v.above == 0 and "3 periods of 1 ms were missed" in v.sentence
    assert verdict(r, 2 * MS).status == "pass"               # 2 ms / 50 µs; the 1 ms interval's overruns say nothing


def test_overflow_beyond_the_histogram_is_counted_from_its_range():
    # cyclictest -h 1000: 5 wake-ups beyond 999 µs, its own max line says 4000 µs
    r = run([us_cpu(0, BODY, overflow=5, max_us=4000, range_us=1000)], engine="cyclictest")
    v = verdict(r, 999_000)                                   # every overflowed sample is above 999 µs
    assert (v.status, v.above, v.above_exact) == ("fail", 5, True)
    v = verdict(r, 2 * MS)                                    # beyond 999 µs, but above 2 ms? only the max is sure
    assert (v.status, v.above, v.above_exact) == ("fail", 1, False) and "at least 1 of" in v.sentence
    assert verdict(r, 10 * MS).status == "pass"              # 10 / 4 = 2.5


def test_unknown_max_fails_on_kept_samples_and_is_otherwise_unknown():
    r = run([us_cpu(0, {**BODY, 900: 4}, max_us=-1)], engine="import")   # the blog CSV: no max line
    v = verdict(r, 500_000)
    assert (v.status, v.above, v.above_exact) == ("fail", 4, False) and "true maximum is unknown" in v.sentence
    v = verdict(r, 1 * MS)
    assert v.status == "unknown" and v.worst_max_ns is None and "may have been lost" in v.sentence


def test_emulated_and_empty_runs_cannot_be_judged():
    emu = run([us_cpu(0, {**BODY, 300: 1})], config={"emulated": True})
    v = verdict(emu, 1 * MS)
    assert v.status == "unknown" and "QEMU" in v.sentence and "300.0 µs" in v.sentence
    empty = run([us_cpu(0, {20: 0})])
    assert verdict(empty, 1 * MS).status == "unknown"


def test_a_partial_run_keeps_its_status_and_says_what_it_covers():
    ok = run([us_cpu(0, {**BODY, 300: 1})], state="interrupted", duration_s=600)
    v = verdict(ok, 1 * MS)
    assert v.status == "pass" and "of the 600 s measured before the run ended interrupted" in v.sentence
    bad = run([us_cpu(0, {**BODY, 1500: 1})], state="killed", duration_s=60)
    v = verdict(bad, 1 * MS)
    assert v.status == "fail" and "ended killed" in v.sentence


def test_short_and_non_rt_runs_warn_without_changing_the_status():
    r = run([us_cpu(0, {**BODY, 300: 1})], duration_s=60, config={"priority": 0, "policy": "other"})
    v = verdict(r, 1 * MS)
    assert v.status == "pass"
    assert any("too short" in w for w in v.warnings) and any("real-time priority" in w for w in v.warnings)
    assert any(w.startswith("the run lasted 60 s: too short") for w in v.warnings)
    short = verdict(run([us_cpu(0, {**BODY, 300: 1})], duration_s=2.4), 1 * MS)
    assert any(w.startswith("the run lasted 2 s: too short") for w in short.warnings)   # as the tables say it


def test_the_confidence_bound_is_rounded_towards_the_weaker_claim():
    v = verdict(run([us_cpu(0, {20: 40})]), 1 * MS)    # 40 wake-ups: 1 / (1 - 0.05^(1/40)) = 13.86
    assert 1 / v.p95_bound == pytest.approx(13.86, abs=0.01)
    assert "fewer than 1 in 13 wake-ups" in v.sentence           # not 14: a stronger promise than the data makes


@pytest.mark.parametrize("text, ns", [("1ms", MS), ("500us", 500_000), ("250µs", 250_000), ("0.5ms", 500_000),
                                      ("2 s", 2_000_000_000), ("1500ns", 1500)])
def test_cycle_times(text, ns):
    assert parse_cycle_time(text) == ns


@pytest.mark.parametrize("text, says", [("1", "has no unit"), ("2000", "has no unit"), ("２ms", "not a duration"),
                                        ("99999999999999999999ms", "out of range"), ("0us", "out of range"),
                                        ("1e3us", "not a duration"), ("nan", "not a duration")])
def test_bad_cycle_times_are_refused(text, says):
    with pytest.raises(UserError, match=says):
        parse_cycle_time(text)


def test_the_margin_is_never_rounded_onto_or_across_a_boundary():
    """Tight means a margin under 2, late a margin under 1: 1.99 is not '2.0×',
    1.04 is not '1.0×' (issue 35: 'TIGHT with a margin of 2.0×')."""
    r = run([us_cpu(0, {**BODY, 502: 1})])                  # 1000 / 502 = 1.992
    v = verdict(r, 1 * MS)
    assert v.status == "tight" and "margin of 1.99×" in v.sentence, v.sentence
    r = run([us_cpu(0, {**BODY, 6730: 1})])                 # 7000 / 6730 = 1.040
    v = verdict(r, 7 * MS)
    assert v.status == "tight" and "margin of 1.04×" in v.sentence, v.sentence
    r = run([us_cpu(0, {**BODY, 490: 1})])                  # 1000 / 490 = 2.04: a pass, not "2.0"
    v = verdict(r, 1 * MS)
    assert v.status == "pass" and "margin of 2.04×" in v.sentence, v.sentence
    assert "margin of 3.3×" in verdict(run([us_cpu(0, {**BODY, 300: 1})]), 1 * MS).sentence  # one decimal otherwise


def test_late_wake_ups_are_counted_thread_by_thread():
    """Each thread whose maximum was late holds at least one late wake-up; a
    thread with one sample beyond its histogram, and that sample its late
    maximum, holds exactly one; a thread whose maximum was on time, none."""
    r = run([us_cpu(0, BODY, overflow=4, max_us=3000, range_us=400),
             us_cpu(1, BODY, overflow=1, max_us=2000, range_us=400),
             us_cpu(2, BODY, overflow=3, max_us=800, range_us=400)], engine="import")
    v = verdict(r, 1 * MS)
    assert (v.status, v.above, v.above_exact, v.above_at_most) == ("fail", 2, False, 5), v
    assert "at least 2 of" in v.sentence and "at most 5" in v.sentence
    r = run([us_cpu(0, BODY, overflow=1, max_us=3000, range_us=400),
             us_cpu(1, BODY, overflow=1, max_us=2000, range_us=400)], engine="import")
    v = verdict(r, 1 * MS)
    assert (v.above, v.above_exact) == (2, True) and "at least" not in v.sentence
