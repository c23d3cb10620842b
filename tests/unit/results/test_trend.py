"""The promotion rule, applied as docs/monitoring.md states it: N days, M
windows, no unclean restart, no regression at the p99.99 and the max
against the kernel before; kernel changes and unclean restarts found."""

from __future__ import annotations

import pytest

from rtforge.results.soak.promotion import Rule, changes, evaluate, kernel_spans
from rtforge.results.soak.windows import parse_window

from ...support.soakdata import window

DAY = 86400


def history(kernels: list[tuple[str, int, list[int]]], start: int = 1_800_000_000, window_s: int = 3600):
    """(kernel, windows, latencies of each window) in order, one life per kernel."""
    out, t = [], start
    for k, (name, n, lat) in enumerate(kernels):
        for i in range(n):
            out.append(parse_window(window(i, t, lat, life=f"life-{k}", kernel=name, window_s=window_s)))
            t += window_s
    return out


RULE = Rule(min_days=2, min_windows=40, margin=0.10)


def test_promoted_after_the_days_and_windows_without_regression():
    ws = history([("6.6-rt", 60, [5000] * 9999 + [80_000]), ("6.12-rt", 60, [5000] * 9999 + [85_000])])
    spans = kernel_spans(ws, None, [])
    assert [s.label for s in spans] == ["6.6-rt", "6.12-rt"]
    assert spans[1].windows == 60 and spans[1].days == pytest.approx(60 / 24)
    assert spans[1].max_ns == 85_000 and spans[1].p9999_ns is not None
    v = evaluate(spans, RULE)
    assert v.status == "promoted", v.line
    assert v.line.startswith("kernel 6.12-rt: 2.5 days, 60 windows, no regression against kernel 6.6-rt")


def test_waiting_says_what_is_missing():
    ws = history([("6.6-rt", 60, [5000, 80_000]), ("6.12-rt", 30, [5000, 80_000])])
    v = evaluate(kernel_spans(ws, None, []), RULE)
    assert v.status == "waiting" and v.missing == ["0.8 more days", "10 more windows"]


@pytest.mark.parametrize("b_lat, worse, fine", [([5000] * 9999 + [90_000], "max", "p99.99"),
                                                ([5000] * 9990 + [50_000] * 10, "p99.99", "max")])
def test_a_regression_at_the_max_or_the_tail_is_one_at_any_time(b_lat, worse, fine):
    ws = history([("6.6-rt", 60, [5000] * 9999 + [80_000]), ("6.12-rt", 5, b_lat)])
    v = evaluate(kernel_spans(ws, None, []), RULE)
    assert v.status == "regression" and f"{worse} " in v.line and f"{fine} " not in v.line, v.line


def test_within_the_margin_is_no_regression():
    ws = history([("6.6-rt", 60, [5000, 80_000]), ("6.12-rt", 60, [5000, 88_000])])
    assert evaluate(kernel_spans(ws, None, []), RULE).status == "promoted"


def test_an_unclean_restart_holds_the_kernel_back():
    ws = history([("6.6-rt", 60, [5000, 80_000]), ("6.12-rt", 60, [5000, 80_000])])
    gap = {"event": "gap", "t_ns": 1, "from_ns": 0, "to_ns": 1, "clean": False, "reboot": True,
           "life_before": "life-1"}
    spans = kernel_spans(ws, None, [gap])
    assert spans[1].unclean == 1
    v = evaluate(spans, RULE)
    assert v.status == "waiting" and "1 unclean restart" in v.line


def test_the_first_kernel_is_the_baseline_and_changes_are_found():
    ws = history([("6.6-rt", 3, [5000])])
    assert evaluate(kernel_spans(ws, None, []), RULE).status == "baseline"
    assert evaluate([], RULE).status == "none"
    two = history([("6.6-rt", 2, [5000]), ("6.12-rt", 2, [5000]), ("6.6-rt", 1, [5000])])
    assert [(a, b) for _, a, b in changes(two)] == [("6.6-rt", "6.12-rt"), ("6.12-rt", "6.6-rt")]


def test_two_builds_of_one_release_are_two_kernels():
    ws = [parse_window(window(0, 1_800_000_000, [5000], kernel="6.12-rt", kver="#1 SMP PREEMPT_RT Mon")),
          parse_window(window(0, 1_800_003_600, [5000], kernel="6.12-rt", kver="#2 SMP PREEMPT_RT Tue"))]
    labels = [s.label for s in kernel_spans(ws, None, [])]
    assert len(labels) == 2 and labels[0] != labels[1] and all(x.startswith("6.12-rt (#") for x in labels)


def test_the_rule_states_itself():
    assert Rule().text() == ("a kernel is promoted after 30 days and 8,000 windows with no unclean restart and no "
                             "regression against the kernel before it: its p99.99 and its max each at most 10 % "
                             "above that kernel's")


def test_the_reference_is_the_last_promoted_kernel_not_the_one_before():
    """A chain of kernels each under 10 % worse than the one before drifts:
    B waits (too few windows), C is 9 % worse than B and 19 % worse than A,
    the last promoted one -- a regression."""
    ws = history([("6.6-rt", 60, [5000, 80_000]), ("6.12-rt", 20, [5000, 87_000]), ("6.18-rt", 60, [5000, 95_000])])
    spans = kernel_spans(ws, None, [])
    v = evaluate(spans, RULE)
    assert v.status == "regression" and v.reference.label == "6.6-rt", v.line
    assert "max 95.0 µs > 80.0 µs + 10 %" in v.line
    # and once B is promoted, it is the reference
    ws = history([("6.6-rt", 60, [5000, 80_000]), ("6.12-rt", 60, [5000, 87_000]), ("6.18-rt", 60, [5000, 95_000])])
    v = evaluate(kernel_spans(ws, None, []), RULE)
    assert v.status == "promoted" and v.reference.label == "6.12-rt", v.line


def test_the_reference_is_judged_over_as_many_days_as_the_candidate():
    """A's worst window came after 50 hours; B has run 10: B is held to A's first 10 hours."""
    a = [parse_window(window(i, 1_800_000_000 + i * 3600, [5000, 50_000 if i != 50 else 200_000], life="a",
                             kernel="6.6-rt", window_s=3600)) for i in range(60)]
    b = [parse_window(window(i, 1_800_000_000 + (60 + i) * 3600, [5000, 80_000], life="b", kernel="6.12-rt",
                             window_s=3600)) for i in range(10)]
    v = evaluate(kernel_spans(a + b, None, []), RULE)
    assert v.status == "regression", v.line
    assert "over its first 0.4 days" in v.line and "max 80.0 µs > 50.0 µs + 10 %" in v.line
