"""The report and its plots as a reader sees them: opened in headless
Chromium at 1400 and 800 px, the plots' SVG read for their tick labels.
No TeX source, no '$' residue, no 'None'; every axis labelled with
numbers; nothing wider than the page; the verdict first."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from rtforge.cli import main
from rtforge.report import plots
from rtforge.results.importers import import_file
from rtforge.results.store.runstore import Store

from ..support.browser import layout, screenshot
from ..support.runs import run, us_cpu

CORPUS = Path(__file__).parents[1] / "corpus" / "cyclictest"
SVG = "{http://www.w3.org/2000/svg}"
SUPERSCRIPTS = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
SHOTS = Path(__file__).resolve().parents[2] / ".cache" / "screenshots"   # kept for a person to look at


def tick_number(text: str) -> float:
    """'10⁴' -> 1e4, '1,000' -> 1000, '0.5' -> 0.5; ValueError for anything else (TeX, words)."""
    t = text.replace(",", "").replace("−", "-")
    if m := re.fullmatch(r"10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)", t):
        return 10.0 ** int(m[1].translate(SUPERSCRIPTS))
    return float(t)


def axes_ticks(svg_text: str) -> list[tuple[str, list[str]]]:
    """Each axis of an SVG plot (matplotlib names them matplotlib.axis_N) -> ('x' or 'y', its tick labels)."""
    root = ET.fromstring(svg_text)
    out = []
    for g in root.iter(f"{SVG}g"):
        if g.get("id", "").startswith("matplotlib.axis_"):
            ticks = [tick for tick in g if tick.get("id", "").startswith(("xtick_", "ytick_"))]
            texts = ("".join(x.itertext()).strip() for tick in ticks for x in tick.iter(f"{SVG}text"))
            labels = [t for t in texts if t]
            out.append((ticks[0].get("id")[0] if ticks else "?", labels))
    return out


def assert_numeric_axes(svg_text: str, where: str) -> None:
    """Every y axis carries numbers; so does the x axis (panels sharing one
    x axis show its labels under the lowest panel only)."""
    axes = axes_ticks(svg_text)
    assert axes, f"{where}: no axis found"
    for kind, ticks in axes:
        if kind == "y":
            assert len(ticks) >= 2, f"{where}: a y axis has tick labels {ticks}"
        for t in ticks:
            tick_number(t)  # raises for TeX source or words
    assert any(kind == "x" and len(ticks) >= 2 for kind, ticks in axes), f"{where}: no labelled x axis"


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    """A store as a user has it: a measured-looking run with a series and
    telemetry, and three imports of other people's cyclictest files."""
    tmp = tmp_path_factory.mktemp("view")
    store = Store(tmp / "results")
    n = 600
    rng = np.random.default_rng(3)
    per_second = [[int(v) for v in rng.lognormal(np.log(30_000), 0.3, n)] for _ in range(2)]
    per_second[1][400] = 7_600_000                          # one 7.6 ms wake-up, as in the run
    measured = run([us_cpu(0, {12: 1_000_000, 30: 40_000, 90: 300}), us_cpu(1, {12: 990_000, 40: 1000, 7600: 1})],
                   label="stock 6.12", duration_s=n, interval_us=200,
                   series={"t_s": list(range(n)), "cpus": [0, 1], "max_ns": per_second,
                           "count": [[5000] * (n - 1) + [40]] * 2, "overruns": [[0] * n] * 2,
                           "irqs": [[1000 + i % 7 for i in range(n)]] * 2},
                   telemetry={"t_s": [float(i) for i in range(n)], "temp_mc": {"cpu-thermal": [52_000] * n},
                              "freq_khz": {"cpu0": [1_500_000] * n}, "throttled": [0] * n, "load1": [2.0] * n})
    measured.cpus[1].overruns = 55
    store.save(measured)
    imports = [import_file(CORPUS / f, store, label=lbl) for f, lbl in (
        ("koen-h400-4t-100M-nort.txt", "koen rt 100M"),        # overflow, a 20 ms tail
        ("civcode-blogcsv-rt.csv", "blog csv"),               # histogram only: no max
        ("romansereda-summary-rt-4t.txt", "status lines"))]   # no histogram at all
    return store, [measured, *imports], tmp


# over 2 s, yet in make check: the user's view of the evidence is the fast loop's too (issue 21)
def test_the_report_reads_cleanly_in_chromium_at_1400_and_800_px(evidence):
    store, runs, tmp = evidence
    out = tmp / "report.html"
    refs = [r.run_id for r in runs]
    assert main(["report", *refs, "--cycle-time", "10ms", "-o", str(out), "--results-dir", str(store.root)]) == 0
    html = out.read_text()
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    assert len(svgs) >= 4  # a histogram for each run that kept one, the timeline, the exceedance, the comparison
    for i, svg in enumerate(svgs):
        assert_numeric_axes(svg, f"plot {i + 1}")
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1400, 800):
        seen = layout(out, width, tmp)
        text = "\n".join(seen["texts"])
        assert "mathdefault" not in text and "$" not in text and "None" not in text
        # a command in a sentence is set as code, never as Markdown's backticks
        assert "`" not in text and "rtforge show" in seen["texts"], [t for t in seen["texts"] if "`" in t]
        assert seen["wide"] == [] and seen["overflowing"] == [], (width, seen["wide"][:5], seen["overflowing"][:5])
        assert seen["scroll_width"] <= seen["width"]
        h2 = [h for h in seen["headings"] if h["level"] == "H2"]
        assert h2[0]["id"] == "verdict"
        # the 10 ms verdicts, worked out from the runs' own figures: 7.6 ms of 10 ms is tight (margin 1.3);
        # koen's 20 ms max fails; the blog CSV keeps samples under 10 ms but no max: unknown
        verdicts = [t for t in seen["texts"] if t in ("pass", "tight", "fail", "unknown")]
        assert verdicts[:3] == ["tight", "fail", "unknown"], verdicts
        screenshot(out, width, SHOTS / f"report-{width}.png")


def test_plots_print_numbers_and_user_text_as_written(evidence, tmp_path):
    store, runs, _ = evidence
    measured = runs[0]
    measured.label = "costs $5 or $6 \\alpha"   # TeX would typeset this
    svgs = {"hist": plots.latency_histogram(measured, 1_000_000), "timeline": plots.timeline(measured, 1_000_000),
            "cdf": plots.exceedance(runs[:3], 1_000_000), "compare": plots.compare_overlay(runs[:3], 1_000_000)}
    for name, fig in svgs.items():
        svg = plots.render(fig, "svg").decode()
        assert_numeric_axes(svg, name)
        assert "mathdefault" not in svg
        if name in ("hist", "timeline"):
            assert "costs $5 or $6 \\alpha" in svg  # the label, literally
        assert "cycle time 1 ms" in svg
    hist = svgs["hist"].axes[0]
    assert hist.get_xscale() == "log"   # 7.6 ms against a p99.9 of 30 µs: the tail would crush the body


def test_a_status_line_import_has_nothing_to_plot_and_says_so(evidence, tmp_path, capsys):
    store, runs, _ = evidence
    status = runs[3]
    rc = main(["plot", status.run_id, "-o", str(tmp_path / "h.svg"), "--results-dir", str(store.root)])
    err = capsys.readouterr().err
    assert rc == 2 and "kept no histogram" in err and not (tmp_path / "h.svg").exists()


@pytest.mark.parametrize("name, argv, magic", [
    ("p.png", [], b"\x89PNG"), ("p.svg", [], b"<?xml"), ("plot.out", ["--format", "png"], b"\x89PNG")])
def test_the_plot_format_follows_the_file_name(evidence, tmp_path, name, argv, magic):
    store, runs, _ = evidence
    assert main(["plot", runs[0].run_id, "-o", str(tmp_path / name), *argv, "--results-dir", str(store.root)]) == 0
    assert (tmp_path / name).read_bytes().startswith(magic)


@pytest.mark.parametrize("name, argv, start", [
    ("r.md", [], "# rtforge latency report"), ("r.html", [], "<!DOCTYPE html>"),
    ("notes.txt", ["--format", "md"], "# rtforge latency report")])
def test_the_report_format_follows_the_file_name(evidence, tmp_path, name, argv, start):
    store, runs, _ = evidence
    assert main(["report", runs[1].run_id, "-o", str(tmp_path / name), *argv, "--results-dir", str(store.root)]) == 0
    assert (tmp_path / name).read_text().startswith(start)


def test_an_unknown_extension_is_refused(evidence, tmp_path, capsys):
    store, runs, _ = evidence
    assert main(["report", runs[1].run_id, "-o", str(tmp_path / "r.pdf"), "--results-dir", str(store.root)]) == 2
    assert "cannot tell the report format" in capsys.readouterr().err and not (tmp_path / "r.pdf").exists()


def test_every_text_of_the_plots_is_legible_at_800_px(tmp_path):
    """At 800 px the reproducer under the histogram and the loads' settle label
    on the timeline were drawn ~5-7 px tall; now no text of a plot is under 8 px,
    and a long reproducer wraps inside its figure instead of running off it."""
    store = Store(tmp_path / "results")
    n = 120
    command = ("rtforge latency pi@rack-7.lab.example --duration 2h --interval-us 200 --load cpu,io,net "
               "--priority 95 --cpus 2,3 --settle-s 5 --label 'a label that makes the command long'")
    r = run([us_cpu(0, {12: 100_000, 30: 400}), us_cpu(1, {12: 99_000, 84: 1})], label="long command",
            duration_s=n, reproducer=command, config={"settle_s": 5},
            series={"t_s": list(range(n)), "cpus": [0, 1], "max_ns": [[40_000] * n] * 2, "count": [[5000] * n] * 2,
                    "overruns": [[0] * n] * 2})
    store.save(r)
    out = tmp_path / "r.html"
    assert main(["report", r.run_id, "--cycle-time", "1ms", "-o", str(out), "--results-dir", str(store.root)]) == 0
    for width in (1400, 800):
        seen = layout(out, width, tmp_path)
        assert seen["wide"] == [], seen["wide"][:5]
        sizes = seen["svg_text"]
        assert sizes[0][0] >= 8, sizes[:5]
        words = " ".join(t for _, t in sizes)
        assert "loads starting (5 s, not measured)" in words and "--label" in words
        screenshot(out, width, SHOTS / f"report-small-text-{width}.png")
