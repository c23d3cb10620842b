"""The plots as a reader sees them, read back from their SVG: where the
axes run (tick labels), what the legend names, where the cycle time is
marked.  The runs are built by hand, so each range follows from the
numbers written here (an 84 µs worst case, a 1 ms cycle)."""

from __future__ import annotations

import re

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from rtforge.cli import main
from rtforge.report import plots
from rtforge.results.store.runstore import Store

from ..support.runs import run, us_cpu
from .test_report_view import axes_ticks, tick_number

N = 600
SERIES = {"t_s": list(range(N)), "cpus": [0, 1], "max_ns": [[40_000 + 1000 * (i % 40) for i in range(N)]] * 2,
          "count": [[5000] * N] * 2, "overruns": [[0] * N] * 2}


def good_run(**kw):
    """A good RT run: worst wake-up 84 µs, a per-second series topping at 79 µs."""
    kw = {"label": "rt 6.12", **kw}
    return run([us_cpu(0, {12: 1_000_000, 30: 40_000, 60: 30}), us_cpu(1, {12: 990_000, 40: 1000, 84: 1})],
               duration_s=N, series=SERIES, **kw)


def svg(fig) -> str:
    return plots.render(fig, "svg").decode()


def latency_ticks(text: str, kind: str) -> list[float]:
    """The tick values of the first axis of this kind ('x' or 'y') that carries labels."""
    return next([tick_number(t) for t in ticks] for k, ticks in axes_ticks(text) if k == kind and ticks)


@pytest.mark.parametrize("name, axis", [("hist", "x"), ("cdf", "x"), ("timeline", "y"), ("compare", "x")])
def test_a_cycle_time_far_beyond_the_data_is_an_arrow_at_the_edge(name, axis):
    """A 1 ms line stretched an 84 µs run's axis to 1,050 µs (the data in its left 8 %)."""
    r, other = good_run(), good_run(run_id="20260101-000000-pi-0002", label="again")
    fig = {"hist": lambda: plots.latency_histogram(r, 1_000_000), "cdf": lambda: plots.exceedance([r], 1_000_000),
           "timeline": lambda: plots.timeline(r, 1_000_000),
           "compare": lambda: plots.compare_overlay([r, other], 1_000_000)}[name]()
    text = svg(fig)
    ticks = latency_ticks(text, axis)
    assert max(ticks) <= 200, ticks                       # the axis is the data's: up to 84 µs and a margin
    arrow = "↑" if axis == "y" else "→"
    assert f"cycle time 1 ms {arrow}" in text


@pytest.mark.parametrize("name, axis", [("hist", "x"), ("cdf", "x"), ("timeline", "y")])
def test_a_cycle_time_near_the_data_is_a_line_within_the_axis(name, axis):
    r = good_run()
    fig = {"hist": lambda: plots.latency_histogram(r, 90_000), "cdf": lambda: plots.exceedance([r], 90_000),
           "timeline": lambda: plots.timeline(r, 90_000)}[name]()
    ax = fig.axes[0]
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    assert hi > 90, (lo, hi)                             # the 90 µs line is inside the frame
    lines = [ln for ln in ax.get_lines() if ln.get_label() == "cycle time 90 µs"]
    assert len(lines) == 1 and "→" not in svg(fig) and "↑" not in svg(fig)


def test_legends_stand_above_the_axes_and_the_worst_sample_off_the_frame():
    """The legend sat over the cycle line at the top right; the 7.6 ms sample
    was drawn on the right-hand frame."""
    r = run([us_cpu(0, {12: 1_000_000, 30: 40_000}), us_cpu(1, {12: 990_000, 7600: 1})], label="stock")
    for fig in (plots.latency_histogram(r, 8_000_000), plots.exceedance([r], 8_000_000),
                plots.timeline(good_run(), 90_000)):
        canvas = FigureCanvasAgg(fig)
        canvas.draw()                                      # laid out, so the boxes are known
        ax = fig.axes[0]
        renderer = canvas.get_renderer()
        assert ax.get_legend().get_window_extent(renderer).y0 >= ax.get_window_extent(renderer).y1
    ax = plots.latency_histogram(r).axes[0]
    left, right = ax.get_xlim()
    assert ax.get_xscale() == "log" and right / 7600 > (right / left) ** 0.03   # a visible gap to the frame
    ax = plots.exceedance([r]).axes[0]
    rarest = 1 / r.cpus[1].count
    assert ax.get_ylim()[0] < rarest / 2 and ax.get_xlim()[1] > 7600 * 1.1


def test_one_x_scale_for_every_histogram_of_a_report(tmp_path):
    """The report drew the good run's histogram linear and the bad run's log:
    one rule now decides for the whole report, and the axis label says which."""
    store = Store(tmp_path / "results")
    good = good_run()
    bad = run([us_cpu(0, {12: 1_000_000, 30: 40_000}), us_cpu(1, {12: 990_000, 7600: 1})], label="stock",
              run_id="20260101-000000-pi-0002")
    for r in (good, bad):
        store.save(r)
    out = tmp_path / "r.html"
    assert main(["report", good.run_id, bad.run_id, "-o", str(out), "--results-dir", str(store.root)]) == 0
    html = out.read_text()
    figures = re.findall(r'<figure id="fig-(hist-\d|compare)">(.*?)</figure>', html, re.S)
    assert [f for f, _ in figures] == ["hist-1", "hist-2", "compare"]
    labels = {f: "log scale" in body for f, body in figures}
    assert labels == {"hist-1": True, "hist-2": True, "compare": True}, labels
    # the good run alone has no long tail: its own plot is linear, as OSADL draws it
    assert plots.latency_histogram(good).axes[0].get_xscale() == "linear"


@pytest.mark.parametrize("kind", ["cdf", "compare"])
def test_a_run_without_a_histogram_is_named_not_drawn(tmp_path, capsys, kind):
    """--kind cdf drew a legend entry without a curve for it, --kind compare
    dropped it without a word."""
    store = Store(tmp_path / "results")
    good = good_run()
    bare = run([us_cpu(0, {12: 1000})], label="status only", run_id="20260101-000000-pi-0003")
    bare.cpus[0].hist = bare.cpus[0].hist.__class__.from_buckets([])   # min, avg and max alone, as status lines
    for r in (good, bare, good_run(run_id="20260101-000000-pi-0004", label="again")):
        store.save(r)
    out = tmp_path / "p.svg"
    assert main(["plot", "rt 6.12", "status only", "again", "--kind", kind, "-o", str(out),
                 "--results-dir", str(store.root)]) == 0
    said = capsys.readouterr().out.splitlines()
    named = [line for line in said if "status only" in line]
    assert len(named) == 1 and "kept no histogram" in named[0] and bare.run_id in named[0], said
    assert "status only" not in out.read_text()


def test_a_csv_import_s_legend_says_its_maximum_is_unknown():
    """'max ? µs' in the legend: the blog CSV keeps no maximum, only its histogram."""
    r = run([us_cpu(0, {5: 1000, 322: 1}, max_us=-1), us_cpu(1, {6: 1000, 100: 1}, max_us=-1)], label="csv")
    for fig in (plots.latency_histogram(r), plots.exceedance([r, good_run()]), plots.compare_overlay([r, good_run()])):
        text = svg(fig)
        assert "?" not in "".join(t.get_text() for t in fig.axes[0].get_legend().get_texts())
        assert "max unknown, highest kept 322.0 µs" in text


def test_plot_without_o_says_where_it_wrote_and_its_help_promises_no_verdict(tmp_path, capsys, monkeypatch):
    """`plot` without -o wrote latency-hist.svg here unannounced; its --help
    promised a verdict, which only `report` gives."""
    store = Store(tmp_path / "results")
    store.save(good_run())
    monkeypatch.chdir(tmp_path)
    assert main(["plot", "rt 6.12", "--cycle-time", "1ms", "--results-dir", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'latency-hist.svg'}" in out and "no -o given" in out, out
    assert main(["plot", "--help"]) == 0
    assert "verdict" not in capsys.readouterr().out


def test_a_run_is_not_compared_with_itself(tmp_path, capsys):
    """`compare stock stock` compared a run with itself without a word: ratios of 1."""
    store = Store(tmp_path / "results")
    r = good_run()
    store.save(r)
    for argv in (["compare", "rt 6.12", "rt 6.12"], ["compare", "rt 6.12", r.run_id], ["plot", "rt 6.12", "last",
                                                                                          "--kind", "compare"]):
        assert main([*argv, "--results-dir", str(store.root)]) == 2, argv
        err = capsys.readouterr().err
        assert f"run {r.run_id}: a run is not compared with itself" in err and len(err.strip().splitlines()) <= 2


def _legend_colours(ax) -> dict[str, str]:
    """Each legend entry's name (before its ':') and the colour it is drawn in."""
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D

    legend = ax.get_legend()   # a step line's handle is a Line2D, a histogram's (stairs) a patch
    return {t.get_text().split(":")[0]: to_hex(h.get_color() if isinstance(h, Line2D) else h.get_edgecolor())
            for t, h in zip(legend.get_texts(), legend.legend_handles)}


def test_a_cpu_has_one_colour_in_both_plots_of_a_run_and_a_run_in_both_comparisons():
    """The histogram drew the worst CPU red and the exceedance plot beside it
    took matplotlib's cycle: thread 1 red in one, orange in the other, and
    thread 3 red in the second."""
    r = run([us_cpu(i, {5: 1000, 20 + i: 1}) for i in range(3)] + [us_cpu(3, {5: 1000, 9: 1})], label="rt")
    hist = _legend_colours(plots.latency_histogram(r).axes[0])
    tail = _legend_colours(plots.exceedance([r]).axes[0])
    assert hist == tail and len(set(hist.values())) == 4, (hist, tail)
    assert hist["CPU 2"] == "#d62728"                     # the worst one, highlighted in both
    runs = [run([us_cpu(0, {5 + k: 1000, 30: 1})], label=f"run {k}") for k in range(4)]
    over = _legend_colours(plots.compare_overlay(runs).axes[0])
    tail = _legend_colours(plots.exceedance(runs).axes[0])
    assert {k.split(" (")[0]: v for k, v in over.items()} == tail and len(set(tail.values())) == 4, (over, tail)
