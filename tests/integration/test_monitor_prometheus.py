"""The monitor's metrics through the real chain: the probe writes the
textfile, Debian's node_exporter serves it, Debian's Prometheus scrapes it
every second, and every query of the shipped Grafana dashboard -- read from
its JSON, with the one dashboard variable ($instance) as Grafana sends it
for "All" -- is asked of Prometheus's HTTP API and must answer with the
figures the windows hold."""

from __future__ import annotations

import json
import subprocess
import time
from importlib import resources
from pathlib import Path

import pytest

from rtforge.results.soak.windows import read_windows

from ..support import promstack

pytestmark = [pytest.mark.root, pytest.mark.slow]

SYSROOT = Path(__file__).parents[1] / "fixtures" / "sysroot" / "pi4"
ALL = ".*"  # Grafana's "All" for $instance: the variable's allValue


def dashboard() -> dict:
    return json.loads((resources.files("rtforge.data") / "grafana" / "rtforge.json").read_text())


def queries(doc: dict) -> dict[str, str]:
    """title -> expr of every panel target, and of the annotations."""
    out = {p["title"]: t["expr"] for p in doc["panels"] for t in p["targets"]}
    out.update({f"annotation: {a['name']}": a["expr"] for a in doc["annotations"]["list"]})
    return out


def test_the_dashboard_is_importable_and_uses_only_rtforge_metrics():
    doc = dashboard()
    # the data source is a variable (type datasource): file provisioning has no import step to fill __inputs
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert "__inputs" not in doc and "DS_PROMETHEUS" not in json.dumps(doc)
    used = {json.dumps(x["datasource"]) for x in [*doc["panels"], *doc["annotations"]["list"],
                                                  *doc["templating"]["list"][1:]]}
    assert used == {json.dumps({"type": "prometheus", "uid": "${datasource}"})}
    assert variables["instance"]["allValue"] == ALL
    q = queries(doc)
    assert len(q) >= 10 and all("rtforge_" in e for e in q.values())
    ids = [p["id"] for p in doc["panels"]]
    assert len(set(ids)) == len(ids)


def test_prometheus_scrapes_the_monitor_and_answers_the_dashboards_queries(probe, tmp_path):
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    stack = promstack.start(textfiles, tmp_path / "prom")
    state = tmp_path / "mon"
    try:
        # Windows fall on wall-clock seconds, so the first and the last are
        # partial; started 0.4 s past a second, neither is a sliver that may
        # hold no wake-up (an empty window has no maximum, and no gauge).
        time.sleep((1.4 - time.time() % 1) % 1)
        # a Pi's /sys and /proc (temperature, throttling): telemetry a VM has not
        monitor = subprocess.run([str(probe), "--soak", "--state", str(state), "--window-s", "1", "--duration-s", "8",
                                  "--textfile-dir", str(textfiles), "--sysroot", str(SYSROOT)],
                                 capture_output=True, text=True, timeout=60)
        assert monitor.returncode == 0, monitor.stderr
        windows = read_windows(state)
        textfile = (textfiles / "rtforge.prom").read_text()
        # Prometheus has scraped the monitor's last textfile
        stack.wait_for("rtforge_windows_total", lambda r: r and float(r[0]["value"][1]) == len(windows))
        answers = {}
        for title, expr in queries(dashboard()).items():
            got = stack.query(expr.replace("$instance", ALL))
            if not title.startswith("annotation"):
                assert got, f"'{title}' ({expr}) answered nothing"
            answers[title] = got
    finally:
        stack.stop()

    last = windows[-1]
    by_cpu = {int(r["metric"]["cpu"]): float(r["value"][1]) for r in answers["Worst wake-up per window, per CPU"]}
    assert by_cpu == {c.cpu: c.max_ns / 1e9 for c in last.cpus if c.max_ns is not None}
    assert all(r["metric"]["instance"] == stack.instance for r in answers["Worst wake-up per window, per CPU"])
    # a quantile lies at or below the bound of the bucket that holds the worst wake-up
    bounds = sorted({float(line.split('le="')[1].split('"')[0]) for line in textfile.splitlines()
                     if "_bucket{" in line and 'le="+Inf"' not in line})

    def bound_above(ns: int) -> float:
        return next((b for b in bounds if b >= ns / 1e9), float("inf"))

    (p9999,) = answers["p99.99 over the last hour"]
    assert 0 < float(p9999["value"][1]) <= bound_above(max(w.max_ns for w in windows if w.max_ns is not None))
    for r in answers["p99 per CPU over the last hour"]:
        cpu = int(r["metric"]["cpu"])
        assert 0 < float(r["value"][1]) <= bound_above(max(c.max_ns for w in windows for c in w.cpus
                                                              if c.cpu == cpu and c.max_ns is not None))
    (temp,) = answers["Temperature (hottest reading per window)"]
    assert float(temp["value"][1]) == pytest.approx(81.479)
    flags = {r["metric"]["flag"]: float(r["value"][1])
             for r in answers["Raspberry Pi throttling (firmware flags seen in the window)"]}
    assert flags == {"under_voltage": 1.0, "arm_freq_capped": 0.0, "throttled": 1.0, "soft_temp_limit": 0.0}
    (kernel,) = answers["Kernel measured"]
    assert kernel["metric"]["release"] == last.kernel
    rate = sum(float(r["value"][1]) for r in answers["Wake-ups measured per second"])
    assert rate > 0
    overruns = sum(float(r["value"][1]) for r in answers["Missed periods (overruns) in the last hour"])
    assert overruns >= 0
    (age,) = answers["Seconds since the last window closed"]
    assert 0 <= float(age["value"][1]) < 120
