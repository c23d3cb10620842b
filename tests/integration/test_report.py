"""Plots, comparisons, verdicts and reports, from stored results."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matplotlib.image import imread

from rtforge.cli import main
from rtforge.report import document, plots
from rtforge.report.compare import compare_runs
from rtforge.results.hist import Histogram
from rtforge.results.model import CpuResult, RunResult
from rtforge.results.store.runstore import Store

from ..conftest import run_probe


def probe_cpu(probe, cpu: int, values) -> CpuResult:
    """A CPU result whose histogram the real probe code built from values."""
    doc = json.loads(run_probe(probe, "--hist-stdin", input="\n".join(map(str, values))).stdout)
    return CpuResult(cpu=cpu, count=doc["count"], min_ns=doc["min_ns"], max_ns=doc["max_ns"], sum_ns=doc["sum_ns"],
                     overruns=0, hist=Histogram.from_buckets(doc["buckets"]))


def make_run(cpus, label="run", preempt="rt", **kw) -> RunResult:
    args = dict(
        run_id=f"20260101-000000-pi-{abs(hash(label)) % 9999:04x}",
        engine="probe",
        state="complete",
        host="pi",
        start_time="2026-01-01T00:00:00+00:00",
        label=label,
        duration_s=7200.0,
        config={"interval_us": 200, "priority": 90, "policy": "fifo", "loads": ["cpu"], "cpus": [c.cpu for c in cpus]},
        system={"kernel_release": "6.12.0-rt", "preempt_model": preempt},
        cpus=cpus,
        reproducer=f"rtforge latency --duration 2h --load cpu --label '{label}'",
    )
    args.update(kw)
    return RunResult(**args)


def cyclictest_cpu(cpu: int, counts_by_us: dict[int, int], overflow: int, max_us: int, range_us: int) -> CpuResult:
    buckets = [[k * 1000, k * 1000, n] for k, n in counts_by_us.items()]
    n = sum(counts_by_us.values()) + overflow
    return CpuResult(
        cpu=cpu,
        count=n,
        min_ns=min(counts_by_us) * 1000,
        max_ns=max_us * 1000,
        sum_ns=None,
        overruns=None,
        hist=Histogram.from_buckets(buckets, overflow, (range_us - 1) * 1000),
    )


@pytest.fixture(scope="module")
def samples():
    rng = np.random.default_rng(7)
    return {
        cpu: np.concatenate(
            [rng.lognormal(np.log(15_000 + 3000 * cpu), 0.2, 20_000), rng.pareto(2, 50) * 20_000 + 40_000]
        ).astype(np.int64)
        for cpu in range(4)
    }


@pytest.fixture(scope="module")
def probe_run(probe, samples) -> RunResult:
    return make_run([probe_cpu(probe, cpu, v) for cpu, v in samples.items()], label="RT 6.12")


# -- the binning behind the OSADL plot ------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.integers(0, 5_000_000), min_size=1, max_size=300), bin_us=st.sampled_from([1, 2, 5, 50]))
def test_us_bins_keep_every_sample_and_show_every_bucket(probe, values, bin_us):
    cpu = probe_cpu(probe, 0, values)
    top = (max(values) + 1) / 1000 * 1.02 + 1
    edges, counts = plots.us_bins(cpu.hist, bin_us, top)
    assert counts.sum() == pytest.approx(len(values))
    for lo, hi, _n in cpu.hist.to_buckets():
        first, last = int(lo / 1000 // bin_us), int((hi + 1) / 1000 // bin_us)
        assert counts[first : last + 1].max() >= 1, (lo, hi)  # visible above the 0.8 floor


def test_cyclictest_buckets_land_exactly_on_their_microsecond():
    cpu = cyclictest_cpu(0, {3: 5, 4: 7, 90: 1}, overflow=0, max_us=90, range_us=100)
    edges, counts = plots.us_bins(cpu.hist, 1, 100)
    assert (counts[3], counts[4], counts[90]) == (5, 7, 1) and counts.sum() == 13


# -- plots -----------------------------------------------------------------------


def test_osadl_plot(probe_run, samples):
    fig = plots.latency_histogram(probe_run)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_ylim()[0] == 0.8 and ax.get_xlabel().startswith("latency (µs")
    raw = np.concatenate(list(samples.values()))
    long_tail = raw.max() > plots.TAIL_RATIO * np.quantile(raw, 0.999)  # the rule of docs/measuring.md, on raw samples
    assert ax.get_xscale() == ("log" if long_tail else "linear")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    worst = max(probe_run.cpus, key=lambda c: c.max_ns)
    for c in probe_run.cpus:
        assert any(lbl.startswith(f"CPU {c.cpu}: max {c.max_ns / 1000:,.1f} µs") for lbl in labels)  # "1,502.3" loaded
    assert sum("worst" in lbl for lbl in labels) == 1 and f"CPU {worst.cpu}:" in next(s for s in labels if "worst" in s)
    widths = sorted(p.get_linewidth() for p in ax.patches)
    assert widths[-1] > widths[0]  # the worst CPU is drawn heavier
    texts = [t.get_text() for t in fig.texts if t.get_text() != fig.get_suptitle()]
    assert texts == [probe_run.reproducer]  # the command line under the axis


def test_timeline_pools_long_series_without_losing_the_peak():
    n = 86_400
    max_ns = [[20_000] * n, [25_000] * n]
    max_ns[1][54_321] = 900_000
    tel = {
        "t_s": [float(i) for i in range(n)],
        "temp_mc": {"zone0": [60_000] * n},
        "freq_khz": {"cpu0": [1_500_000] * n},
        "throttled": [0] * n,
        "load1": [1.0] * n,
    }
    tel["throttled"][1000:2000] = [0x4] * 1000  # throttled for 1000 s
    run = make_run(
        [],
        series={
            "t_s": list(range(n)),
            "cpus": [0, 1],
            "max_ns": max_ns,
            "count": [[5000] * n] * 2,
            "overruns": [[0] * n] * 2,
        },
        telemetry=tel,
    )
    fig = plots.timeline(run)
    top = fig.axes[0]
    lines = top.get_lines()
    assert all(len(line.get_xdata()) <= plots.MAX_POINTS for line in lines)
    assert max(np.nanmax(line.get_ydata()) for line in lines) == 900.0  # µs
    assert "time (h)" == fig.axes[1].get_xlabel()
    spans = [p for p in top.patches if p.get_alpha() == 0.15]
    assert len(spans) == 1
    x0, x1 = spans[0].get_x(), spans[0].get_x() + spans[0].get_width()
    assert (x0, x1) == pytest.approx((1000 / 3600, 2000 / 3600))
    assert len(fig.axes) == 3  # latency, temperature, frequency twin


def test_timeline_is_none_without_series(probe_run):
    assert plots.timeline(probe_run) is None


def test_exceedance_matches_numpy_on_raw_samples(probe_run, samples):
    fig = plots.exceedance([probe_run])
    for line, (_cpu, raw) in zip(fig.axes[0].get_lines(), samples.items()):
        x, y = line.get_xdata(), line.get_ydata()
        for xi, yi in zip(x[1:-1:97], y[1:-1:97]):  # x: bucket upper bounds (exclusive) in µs
            assert yi == pytest.approx(np.mean(raw >= round(xi * 1000)), abs=1e-12)
        # from the fastest wake-up (not from an empty 0 µs), out to the worst one at its level
        assert x[0] <= raw.min() / 1000 < x[1]
        assert x[-1] == pytest.approx(raw.max() / 1000) and y[-1] == y[-2] >= 1 / len(raw)


def test_compare_overlay_and_svg_png(probe_run):
    other = make_run(probe_run.cpus[:2], label="stock", preempt="voluntary-or-none")
    fig = plots.compare_overlay([other, probe_run])
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0].startswith("stock (voluntary-or-none): max") and labels[1].startswith("RT 6.12 (rt): max")
    svg = plots.render(fig, "svg").decode()
    assert svg.count("<path") > 5 and "<text" in svg  # text kept as text
    png = plots.render(fig, "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


# -- compare and verdict -----------------------------------------------------------


def test_compare_ratios_reproduce_the_pi4_reference():
    """docs/verdict.md (what people have published): Pi 4B, 4.19, idle: max 301 µs stock -> 93 µs RT (3.2×)."""
    stock = make_run([cyclictest_cpu(0, {20: 1000, 301: 1}, 0, 301, 400)], label="stock", preempt="voluntary-or-none")
    rt = make_run([cyclictest_cpu(0, {15: 1000, 93: 1}, 0, 93, 400)], label="rt")
    rows = compare_runs([stock, rt])
    assert rows[0]["versus_first"] == "first run"
    assert rows[1]["ratio_to_first"]["max_ns"] == pytest.approx(301 / 93)
    assert "max 3.2× lower" in rows[1]["versus_first"]
    assert "max 3.2× higher" in compare_runs([rt, stock])[1]["versus_first"]


# -- reports -----------------------------------------------------------------------


def chromium(*args) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.fail("Debian's chromium is not installed (make setup installs it)")
    base = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        # any network access would fail: the report must not need it
        "--host-resolver-rules=MAP * ~NOTFOUND",
    ]
    return subprocess.run(base + list(args), capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_html_report_renders_in_chromium(tmp_path, probe_run):
    stock = make_run(
        probe_run.cpus[:2],
        label="stock <kernel> & co",
        preempt="voluntary-or-none",
        warnings=["a warning that says what to change"],
    )
    emu = make_run(probe_run.cpus[:1], label="boot test", config={"emulated": True, "priority": 90, "loads": []})
    out = tmp_path / "report.html"
    document.write_html([stock, probe_run, emu], 1_000_000, out)
    html = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing fetched from anywhere
    assert "stock &lt;kernel&gt; &amp; co" in html and "<kernel>" not in html  # labels are escaped
    assert html.index('id="verdict"') < html.index('id="systems"') < html.index('id="plots"')
    assert "emulation noise" in html and "a warning that says what to change" in html
    dom = chromium("--user-data-dir=" + str(tmp_path / "ud1"), "--dump-dom", out.as_uri())
    assert dom.returncode == 0, dom.stderr[-500:]
    n_fig = 3 + 1 + 1  # a histogram per run, exceedance, comparison overlay
    assert dom.stdout.count("<figure") == n_fig and dom.stdout.count("<svg") >= n_fig
    assert dom.stdout.count("<path") > 50
    shot = tmp_path / "shot.png"
    r = chromium(
        "--user-data-dir=" + str(tmp_path / "ud2"), "--window-size=1200,6000", f"--screenshot={shot}", out.as_uri()
    )
    assert r.returncode == 0 and shot.exists(), r.stderr[-500:]
    img = imread(shot)[..., :3]
    assert img.shape[:2] == (6000, 1200)
    non_white = (img < 0.9).any(axis=2)
    assert non_white.mean() > 0.02  # text, tables and plot lines, not a blank page
    red = np.abs(img - np.array([0xD6, 0x27, 0x28]) / 255).max(axis=2) < 0.04
    assert red.sum() > 100  # the worst CPU's red curves were drawn


def test_markdown_report_with_plot_files(tmp_path, probe_run):
    out = tmp_path / "report.md"
    document.write_markdown([probe_run], 250_000, out)
    text = out.read_text()
    assert text.startswith("# rtforge latency report") and "## Verdict for a 250 µs cycle" in text
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(images) == 2 and all((tmp_path / p).stat().st_size > 1000 for p in images)


def test_report_cli_and_bad_input(tmp_path, capsys, probe_run):
    store = Store(tmp_path / "results")
    store.save(probe_run)
    rd = ["--results-dir", str(store.root)]
    assert main(["report", "last", "--cycle-time", "1ms", "-o", str(tmp_path / "r.html"), *rd]) == 0
    assert (tmp_path / "r.html").stat().st_size > 10_000
    assert main(["plot", "last", "--kind", "cdf", "-o", str(tmp_path / "p.png"), *rd]) == 0
    assert imread(tmp_path / "p.png").std() > 0
    capsys.readouterr()
    bad = [
        (["report", "last", "--cycle-time", "soon", *rd], "--cycle-time 'soon' is not a duration"),
        (["report", "last", "--cycle-time", "1", "-o", str(tmp_path / "r.html"), *rd], "--cycle-time '1' has no unit"),
        (["report", "last", "--format", "pdf", *rd], "unknown report format 'pdf'"),
        (["report", "last", "-o", str(tmp_path / "no" / "r.html"), *rd], "is not a directory"),
        (["plot", "last", "--kind", "pie", *rd], "unknown plot kind 'pie'"),
        (["plot", "last", "-o", str(tmp_path / "x.jpg"), *rd], "cannot tell the plot format"),
        (["plot", "last", "--kind", "timeline", "-o", str(tmp_path / "t.svg"), *rd], "has no per-second series"),
        (["plot", "last", "--kind", "compare", "-o", str(tmp_path / "c.svg"), *rd], "needs at least two runs"),
        (["compare", "nope", *rd], "no run has the id or label 'nope'"),
    ]
    for argv, message in bad:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "t.svg").exists() and not (tmp_path / "x.jpg").exists()


def test_percentiles_beyond_the_range_say_so(tmp_path):
    run = make_run([cyclictest_cpu(0, {10: 90}, 10, 5000, 100)])  # 10 % beyond a 100 µs histogram
    out = tmp_path / "r.md"
    document.write_markdown([run], None, out)
    row = next(line for line in out.read_text().splitlines() if line.startswith("| run | 0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5:8] == ["> range", "> range", "5,000.0"]  # p99, p99.99, max from cyclictest's own Max
    assert math.isclose(run.cpus[0].hist.total, 100)
