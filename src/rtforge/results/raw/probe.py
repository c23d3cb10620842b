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

import heapq
import json
from pathlib import Path
from typing import Any

from ...errors import UserError
from ..hist import Histogram
from ..model import CpuResult
from ..store import rawfile

PROBE_FORMATS = {1}
TOP_SPIKES = 100


def read_probe_json(raw: Path) -> dict[str, Any]:
    path = raw / "probe.json"
    try:
        data = rawfile.read_bytes(raw, "probe.json")
        if data is None:
            raise UserError(f"{path} is missing: the probe never started in this run")
        doc = json.loads(data)
    except rawfile.RawFileError as e:
        raise UserError(str(e)) from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be the probe's") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise UserError(f"{path}:{getattr(e, 'lineno', 1)}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: not the probe's JSON object")
    if doc.get("probe_format") not in PROBE_FORMATS:
        raise UserError(
            f"{path}: probe format {doc.get('probe_format')!r} is not one this rtforge reads; upgrade rtforge"
        )
    return doc


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Whole lines only: a line cut by a crash is dropped, not an error."""
    rows = []
    for line in rawfile.lines(path.parent, path.name):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            break
        if not isinstance(row, dict):
            break
        rows.append(row)
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
    def rows():
        for i, line in enumerate(rawfile.lines(raw, "spikes.csv")):
            parts = line.strip().split(",")
            if i and len(parts) == 3 and all(p.isdigit() and len(p) < 20 for p in parts):  # line 0: the header
                yield [int(p) for p in parts]

    # the n largest without holding every spike (a long run logs millions); ties keep their order
    return heapq.nlargest(n, rows(), key=lambda r: r[2])
