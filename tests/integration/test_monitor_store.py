"""A board's soak history in the store at months' scale (issue 34): the
index of its fetched folder (results/soak/windowsdb.py) made at fetch, record
by record, rebuilt from the files when missing or damaged -- so a store
made before it existed opens and is indexed once -- and `trend` read from
it, by span, with its verdict as the exit status.  The folders are written
in the probe's own format (tests/support/soakdata.py); what the index says
is checked against the files read directly."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.soak.promotion import Rule, kernel_spans
from rtforge.results.soak.windows import parse_window, read_events, read_rollups, read_windows, roll
from rtforge.results.soak.windowsdb import NAME, MonitorDB

from ..support.soakdata import S, window, write_events, write_windows

T0 = 1_800_000_000 - 1_800_000_000 % 86400   # a UTC midnight


def board(folder: Path, kernels: list[tuple[str, list[int]]], days: float = 1.0, window_s: int = 3600) -> list:
    """A board folder: per kernel `days` of windows (each with latencies lat), their hours, a gap between."""
    ws, events, t = [], [], T0
    for k, (name, lat) in enumerate(kernels):
        life = f"life{k}-{t}"
        events.append({"event": "start", "t_ns": t * S, "life": life})
        if k:
            events.append({"event": "gap", "t_ns": t * S, "life": life, "life_before": f"life{k - 1}",
                           "from_ns": (t - 60) * S, "to_ns": t * S, "seconds": 60, "reboot": True, "clean": True})
        for i in range(int(days * 86400 / window_s)):
            ws.append(window(i, t, lat, life=life, kernel=name, window_s=window_s, cpus=2))
            t += window_s
        t += 60
    write_windows(folder, ws)
    write_events(folder, events)
    parsed = [parse_window(w) for w in ws]
    (folder / "hours").mkdir(parents=True, exist_ok=True)
    for r in roll(parsed, "hour"):
        month = f"{__import__('datetime').datetime.utcfromtimestamp(r.key):%Y-%m}"
        with (folder / "hours" / f"{month}.jsonl").open("a") as f:
            f.write(json.dumps({"hour": r.key, "life": r.lives[0], "host": "pi", "kernel": r.kernels[0][0],
                                "kver": r.kernels[0][1], "start_ns": r.start_ns, "end_ns": r.end_ns,
                                "windows": r.windows, "partial_windows": r.partial_windows,
                                "covered_ns": r.covered_ns, "alerts": r.alerts, "spikes": r.spikes,
                                "temp_max_mc": r.temp_max_mc, "throttled": r.throttled,
                                "cpus": [c.to_dict() for c in r.cpus]}) + "\n")
    (folder / "state").write_text("host pi\nrunning 0\n")
    return parsed


def fetch(folder: Path, rd: list[str], capsys) -> dict:
    assert main(["monitor", "fetch", "--state-dir", str(folder), "--json", *rd]) == 0
    return json.loads(capsys.readouterr().out)


def trend_json(rd: list[str], capsys, *extra: str) -> tuple[int, list]:
    code = main(["trend", "pi", "--json", *rd, *extra])
    return code, json.loads(capsys.readouterr().out)


def test_fetch_indexes_what_it_adds_and_trend_reads_the_index(tmp_path, capsys):
    src = tmp_path / "board"
    windows = board(src, [("6.12-rt", [5000, 40_000]), ("6.18-rt", [5000, 30_000])])
    rd = ["--results-dir", str(tmp_path / "store")]
    first = fetch(src, rd, capsys)
    assert first["new_windows"] == first["windows"] == len(windows) == 48 and first["gaps"] == 1
    again = fetch(src, rd, capsys)
    assert again["new_windows"] == 0 and again["windows"] == 48
    folder = tmp_path / "store" / "monitor" / "pi"
    with MonitorDB.open(folder) as db:
        assert db.summary().windows == 48
        assert [(w.life, w.n, w.max_ns) for w in db.windows()] == \
            [(w.life, w.n, w.max_ns) for w in read_windows(folder)]
        assert len(db.rollups("hour")) == len(read_rollups(folder, "hour", merged=False))
    # the trend from the index is the trend from the files
    code, (doc,) = trend_json(rd, capsys)
    files = kernel_spans(read_windows(folder, light=True), read_rollups(folder, "hour", merged=False),
                         read_events(folder))
    assert code == 0 and [(k["release"], k["windows"], k["p9999_ns"], k["max_ns"]) for k in doc["kernels"]] == \
        [(s.release, s.windows, s.p9999_ns, s.max_ns) for s in files]


def test_a_store_made_before_the_index_is_indexed_once(tmp_path, capsys):
    """The folder as the code before wrote it (files, no windows.db): trend
    and fetch open it, the index is made from the files, nothing is lost."""
    src = tmp_path / "board"
    board(src, [("6.12-rt", [5000, 40_000])])
    folder = tmp_path / "store" / "monitor" / "pi"
    shutil.copytree(src, folder)
    (folder / "fetch.json").write_text(json.dumps({"files": {}, "destination": "pi"}))
    rd = ["--results-dir", str(tmp_path / "store")]
    assert not (folder / NAME).exists()
    code, (doc,) = trend_json(rd, capsys)
    assert code == 0 and doc["windows"] == 24 and (folder / NAME).exists()
    # damaged: made anew from the files, the same
    (folder / NAME).write_bytes(b"not a database at all" * 100)
    assert trend_json(rd, capsys)[1] == [doc]
    # and a fetch of the same board adds nothing twice
    assert fetch(src, rd, capsys)["windows"] == 24


def test_a_database_that_is_not_rtforges_is_never_altered(tmp_path, capsys):
    folder = tmp_path / "store" / "monitor" / "pi"
    board(folder, [("6.12-rt", [5000])])
    db = sqlite3.connect(folder / NAME)
    db.execute("CREATE TABLE mine (x)")
    db.execute("PRAGMA application_id = 1234")
    db.commit()
    db.close()
    before = (folder / NAME).read_bytes()
    assert main(["trend", "pi", "--results-dir", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert "not rtforge's" in err and len(err.strip().splitlines()) == 1
    assert (folder / NAME).read_bytes() == before


def test_trend_reads_a_span_and_says_a_regression_in_its_exit_status(tmp_path, capsys):
    folder = tmp_path / "store" / "monitor" / "pi"
    board(folder, [("6.12-rt", [5000, 40_000]), ("6.18-rt", [5000, 90_000])], days=2)
    rd = ["--results-dir", str(tmp_path / "store")]
    code, (doc,) = trend_json(rd, capsys, "--min-span", "1d", "--min-windows", "10")
    assert code == 1 and doc["verdict"]["status"] == "regression"      # a "no", for a nightly job to gate on
    # only the first kernel's days: its baseline, no regression
    until = f"{__import__('datetime').datetime.utcfromtimestamp(T0 + 2 * 86400):%Y-%m-%dT%H:%M}"
    code, (doc,) = trend_json(rd, capsys, "--until", until)
    assert code == 0 and [k["release"] for k in doc["kernels"]] == ["6.12-rt"] and doc["windows"] == 48
    code, (doc,) = trend_json(rd, capsys, "--since", until)
    assert [k["release"] for k in doc["kernels"]] == ["6.18-rt"]
    for bad in (["--since", "yesterday"], ["--since", "2026-03-02", "--until", "2026-03-01"]):
        assert main(["trend", "pi", *rd, *bad]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_trend_over_several_boards_says_what_each_alone_says(tmp_path, capsys):
    """Boards are read one at a time (each let go once drawn and judged):
    the JSON of two boards together is each board's own, the plot has a
    row for each, and one regression makes the exit status 1."""
    import matplotlib.image

    store = tmp_path / "store"
    board(store / "monitor" / "pi", [("6.12-rt", [5000, 40_000]), ("6.18-rt", [5000, 90_000])], days=2)
    board(store / "monitor" / "pi2", [("6.12-rt", [5000, 40_000]), ("6.18-rt", [5000, 41_000])], days=2)
    rd, rule = ["--results-dir", str(store)], ["--min-span", "1d", "--min-windows", "10"]
    alone = []
    for name in ("pi", "pi2"):
        code = main(["trend", name, "--json", *rd, *rule, "-o", str(tmp_path / f"{name}.png")])
        alone += json.loads(capsys.readouterr().out)
        assert code == (1 if name == "pi" else 0)
    assert main(["trend", "pi", "pi2", "--json", *rd, *rule, "-o", str(tmp_path / "both.png")]) == 1
    assert json.loads(capsys.readouterr().out) == alone
    assert [d["verdict"]["status"] for d in alone] == ["regression", "promoted"] and alone[1]["windows"] == 96
    one, both = (matplotlib.image.imread(tmp_path / f).shape[0] for f in ("pi.png", "both.png"))
    assert both == 2 * one, (one, both)


@pytest.mark.parametrize("days", [1, 40])
def test_the_long_term_plot_keeps_its_legend_off_the_data_and_draws_the_limit(tmp_path, days):
    """A month of 5-minute windows would merge into a solid band of points:
    bands (max per hour over its p99.99) instead; the legend stands below
    the axes, never on them, and the promotion limit is a line."""
    from rtforge.report.trend import load_trend, trend_figure

    folder = tmp_path / "pi"
    board(folder, [("6.12-rt", [5000, 40_000]), ("6.18-rt", [5000, 42_000])], days=days / 2, window_s=300)
    t = load_trend(folder, "pi", Rule(min_days=1, min_windows=10))
    fig = trend_figure([t])
    fig.canvas.draw()
    ax = fig.axes[0]   # the long-term plot
    legend = ax.get_legend()
    assert legend is not None
    box, frame = legend.get_window_extent(), ax.get_window_extent()
    assert box.y1 <= frame.y0 + 1          # below the plot, not over it
    texts = [x.get_text() for x in legend.get_texts()]
    assert any(x.startswith("promotion limit: max of kernel 6.12-rt + 10 % = ") for x in texts), texts
    assert ax.get_ylabel() == ("per hour: p99.99 to max (µs)" if days == 40 else "max per window (µs)")
