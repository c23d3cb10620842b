"""The fleet report as a reader sees it: opened in headless Chromium at
1400 and 800 px.  Each board is judged for its own cycle time; the
verdicts below are worked out by hand from the runs' figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.store.runstore import Store

from ..support.browser import layout, screenshot
from ..support.runs import run, us_cpu

SHOTS = Path(__file__).resolve().parents[2] / ".cache" / "screenshots"


@pytest.mark.slow
def test_one_row_per_board_each_judged_for_its_own_cycle_time(tmp_path, capsys):
    store = Store(tmp_path / "results")
    # every board's worst wake-up is 300 µs: it passes 1 ms (margin 3.3), is tight at 500 µs (1.7), fails 250 µs
    for i, host in enumerate(("pi-01", "pi-02", "pi-03"), 1):
        store.save(run([us_cpu(0, {20: 50_000, 300: 1}), us_cpu(1, {25: 50_000})], label=host,
                       run_id=f"2026010{i}-000000-{host}-00a{i}", start_time=f"2026-01-0{i}T00:00:00+00:00"))
    # an older run of pi-01 with a worse maximum: the newest is the one judged
    store.save(run([us_cpu(0, {20: 50_000, 900: 1})], label="pi-01 stock", run_id="20251201-000000-pi-01-0000",
                   start_time="2025-12-01T00:00:00+00:00"))
    inv = tmp_path / "lab.ini"
    inv.write_text("[rack]\npi-01 rtforge_cycle_time=1ms\npi-02 rtforge_cycle_time=500us\n"
                   "pi-03 rtforge_cycle_time=250us\npi-04 rtforge_cycle_time=1ms\n[rack:vars]\nansible_host=10.9.9.9\n")
    out = tmp_path / "fleet.html"
    assert main(["fleet", "report", str(inv), "-o", str(out), "--results-dir", str(store.root)]) == 0
    assert "4 boards, 3 with a latency run" in capsys.readouterr().out
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1400, 800):
        seen = layout(out, width, tmp_path)
        assert seen["wide"] == [] and seen["overflowing"] == [], (width, seen["wide"][:5], seen["overflowing"][:5])
        assert seen["scroll_width"] <= seen["width"]
        assert [h["id"] for h in seen["headings"] if h["level"] == "H2"] == ["boards", "per-board"]
        texts = seen["texts"]
        row = texts.index("pi-01")   # the table: board, verdict, cycle, worst, kernel, RT, last seen
        assert texts[row:row + 6] == ["pi-01", "pass", "1 ms", "300.0", "6.12.0-rt", "yes"]
        statuses = [t for t in texts if t in ("pass", "tight", "fail", "no run")]
        assert statuses[:4] == ["pass", "tight", "fail", "no run"]
        assert "None" not in "\n".join(texts)
        # the commands in its sentences are code, not Markdown source
        assert not [t for t in texts if "`" in t] and "rtforge fleet latency INVENTORY --limit pi-04" in texts
        screenshot(out, width, SHOTS / f"fleet-report-{width}.png")
    html = out.read_text()
    assert "20260101-000000-pi-01-00a1" in html and "20251201-000000-pi-01-0000" not in html
    assert "no latency run of this board is stored" in html
