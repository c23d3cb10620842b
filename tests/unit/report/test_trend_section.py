"""The trend a report embeds: two kernels over days with a gap, drawn and
tabled, the rule's verdict stated; text from the board (a kernel release
is whatever the board says) shown, never obeyed -- no markup, no TeX."""

from __future__ import annotations

import re

from rtforge.report.plotting import render
from rtforge.report.trend import load_trend, trend_figure, trend_section
from rtforge.results.soak.promotion import Rule

from ...support.soakdata import window, write_events, write_windows

HOSTILE = "6.12-rt<script>alert(1)</script>$x$"


def board(folder):
    start = 1_800_000_000
    ws = [window(i, start + 3600 * i, [5000, 40_000 + 1000 * (i % 5)], life="a-1", kernel="6.6-rt", window_s=3600)
          for i in range(30)]
    ws += [window(i, start + 3600 * (40 + i), [5000, 42_000], life="b-2", kernel=HOSTILE, window_s=3600,
                  alert=i == 3) for i in range(30)]
    write_windows(folder, ws)
    write_events(folder, [{"event": "gap", "t_ns": (start + 3600 * 40) * 10**9, "life": "b-2",
                           "from_ns": (start + 3600 * 30) * 10**9, "to_ns": (start + 3600 * 40) * 10**9,
                           "seconds": 36000.0, "reboot": True, "clean": True, "life_before": "a-1"}])


def test_the_trend_section_states_the_rule_and_escapes_the_board(tmp_path):
    board(tmp_path / "pi")
    t = load_trend(tmp_path / "pi", "pi", Rule(min_days=1, min_windows=24))
    assert [s.label for s in t.spans] == ["6.6-rt", HOSTILE] and len(t.changes) == 1 and len(t.gaps) == 1
    assert t.verdict.status == "promoted", t.verdict.line
    html = trend_section([t])
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "Promotion rule: a kernel is promoted after 1 days and 24 windows" in html
    assert re.search(r"<b>kernel 6\.12-rt&lt;script&gt;.*: 1\.2 days, 30 windows, no regression against kernel "
                     r"6\.6-rt at the p99\.99 and max", html)
    assert html.count("<tr>") == 3 and "<svg" in html
    md = trend_section([t], "md")
    assert "| 6.6-rt |" in md and "<script>" not in md and "**kernel" in md


def test_the_plot_is_drawn_with_its_text_literal(tmp_path):
    board(tmp_path / "pi")
    t = load_trend(tmp_path / "pi", "pi", Rule())
    svg = render(trend_figure([t]), "svg").decode()
    assert "$x$" in svg.replace("\\$", "$")  # the $...$ pair stays text, not TeX
    assert "max per window (µs)" in svg and "share of wake-ups later" in svg
    assert "pi: 60 windows, 2 kernels, 1 gap" in svg     # not "2 kernel(s), 1 gap(s)"
    png = render(trend_figure([t]), "png")
    assert png[:4] == b"\x89PNG"


def test_latency_axes_are_log_only_over_a_decade_and_the_date_sits_in_the_label(tmp_path):
    """Maxima of 40-44 µs on a log axis were ticked "40 42 44" at uneven steps, which
    reads as linear, and the date offset crowded the time axis' label."""
    board(tmp_path / "pi")
    t = load_trend(tmp_path / "pi", "pi", Rule())
    fig = trend_figure([t])
    svg = render(fig, "svg").decode()
    panel = {ax.get_label(): ax for ax in fig.axes}      # the mosaic's names: long, dist, box
    long_term = panel["long"]
    assert long_term.get_ylabel() == "max per window (µs)"
    assert {long_term.get_yscale(), panel["dist"].get_xscale(), panel["box"].get_yscale()} == {"linear"}
    assert "time (UTC 2027-01-15 to 2027-01-18)" in long_term.get_xlabel()
    assert "2027-Jan" not in svg                          # no offset text beside the label
    # a spike of 10 ms among 40 µs windows spans decades: log, and the label says it
    spiky = tmp_path / "spiky"
    write_windows(spiky, [window(i, 1_800_000_000 + 3600 * i, [5000, 40_000 if i != 7 else 10_000_000],
                                 window_s=3600) for i in range(30)])
    fig = trend_figure([load_trend(spiky, "pi", Rule())])
    long_term = next(ax for ax in fig.axes if ax.get_label() == "long")
    assert long_term.get_yscale() == "log" and long_term.get_ylabel() == "max per window (µs, log scale)"
