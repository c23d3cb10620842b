"""Reading what the probe wrote into a run's ``raw/`` directory.

Files (see rtforge/probe/writer.c):

* ``probe.json``       atomically replaced checkpoint, then the final state
* ``series.jsonl``     one line per second: per-CPU count, max_ns, overruns,
                       irqs (interrupts taken); irq_thread_pct (CPU use of
                       the irq/ threads, % of one CPU) and the busiest one,
                       irq_thread_top and irq_thread_top_pct (null: not
                       sampled; absent: a probe from before them)
* ``telemetry.jsonl``  one line per telemetry sample
* ``spikes.csv``       cpu,t_ns,lat_ns for every wake-up above the threshold

A probe killed with SIGKILL leaves a checkpoint and possibly a cut-off last
line in the .jsonl files; both are read as far as they are whole.

probe.json format history (PROBE_FORMAT in probe/rtprobe.h):

  1  2026-11  first version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from .hist import Histogram
from .model import CpuResult

PROBE_FORMATS = {1}
TOP_SPIKES = 100


def read_probe_json(raw: Path) -> dict[str, Any]:
    path = raw / "probe.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path} is missing: the probe never started in this run") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if doc.get("probe_format") not in PROBE_FORMATS:
        raise UserError(
            f"{path}: probe format {doc.get('probe_format')!r} is not one this rtforge reads; upgrade rtforge"
        )
    return doc


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Whole lines only: a line cut by a crash is dropped, not an error."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def cpus_from_probe(doc: dict[str, Any]) -> list[CpuResult]:
    return [
        CpuResult(
            cpu=c["cpu"],
            count=c["count"],
            min_ns=c["min_ns"],
            max_ns=c["max_ns"] if c["count"] else None,
            sum_ns=c["sum_ns"],
            overruns=c["overruns"],
            hist=Histogram.from_buckets(c["buckets"]),
            spikes=c["spikes"],
            spikes_dropped=c["spikes_dropped"],
        )
        for c in doc["cpus"]
    ]


def series_from_rows(rows: list[dict[str, Any]], cpus: list[int]) -> dict[str, Any] | None:
    """Columnar per-CPU series: max_ns[i][k] is CPU cpus[i] in second t_s[k]."""
    if not rows:
        return None
    n = len(cpus)
    series = {
        "t_s": [r["t"] for r in rows],
        "cpus": cpus,
        **{key: [[r[key][i] for r in rows] for i in range(n)] for key in ("count", "max_ns", "overruns")},
    }
    if any("irqs" in r for r in rows):
        series["irqs"] = [[(r.get("irqs") or [None] * n)[i] for r in rows] for i in range(n)]
        for key in ("irq_thread_pct", "irq_thread_top", "irq_thread_top_pct"):
            series[key] = [r.get(key) for r in rows]
    return series


def telemetry_from_rows(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any] | None:
    if not rows:
        return None
    zones = meta.get("thermal_zones") or []
    zone_names = [f"zone{z['zone']} {z.get('type') or ''}".strip() for z in zones]
    freq_cpus = meta.get("freq_cpus") or []
    return {
        "t_s": [r["t_s"] for r in rows],
        "temp_mc": {name: [r["temp_mc"][i] for r in rows] for i, name in enumerate(zone_names)},
        "freq_khz": {f"cpu{c}": [r["freq_khz"][i] for r in rows] for i, c in enumerate(freq_cpus)},
        "throttled": [r.get("throttled") for r in rows],
        "load1": [r.get("load1") for r in rows],
    }


def top_spikes(raw: Path, n: int = TOP_SPIKES) -> list[list[int]]:
    """The n largest logged spikes as [cpu, t_ns, lat_ns], largest first."""
    path = raw / "spikes.csv"
    if not path.exists() or path.stat().st_size == 0:
        return []
    lines = path.read_text().splitlines()[1:]
    rows = []
    for line in lines:
        parts = line.split(",")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            rows.append(parts)
    if not rows:
        return []
    arr = np.asarray(rows, dtype=np.int64)
    order = np.argsort(-arr[:, 2], kind="stable")[:n]
    return arr[order].tolist()
