"""Soak-monitor records written the way the probe writes them (probe/soak.c,
docs/monitoring.md), for the tests of what reads them: windows with a
chosen kernel, time and latencies, and the events between lives.  The
probe's own output is tested against them in tests/integration/test_monitor_probe.py,
so a drift of either shows."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

from rtforge.results.soak.windows import bucket_index, encode_runs

S = 1_000_000_000


def cpu(cpu: int, lat_ns: list[int], overruns: int = 0) -> dict:
    buckets: dict[int, int] = {}
    for v in lat_ns:
        buckets[bucket_index(v)] = buckets.get(bucket_index(v), 0) + 1
    return {"cpu": cpu, "count": len(lat_ns), "min_ns": min(lat_ns) if lat_ns else None,
            "max_ns": max(lat_ns) if lat_ns else None, "sum_ns": sum(lat_ns), "overruns": overruns,
            "spikes": 0, "h": encode_runs(buckets)}


def window(n: int, start_s: int, lat_ns: list[int], *, life: str = "aaaaaaaa-1", kernel: str = "6.12.0-rt",
           kver: str = "#1 SMP PREEMPT_RT", window_s: int = 300, partial: bool = False, alert: bool = False,
           cpus: int = 1) -> dict:
    return {"v": 1, "life": life, "n": n, "start_ns": start_s * S, "end_ns": (start_s + window_s) * S,
            "partial": partial, "host": "pi", "kernel": kernel, "kver": kver, "interval_ns": 1_000_000,
            "window_s": window_s, "cpus": [cpu(c, lat_ns) for c in range(cpus)], "spikes": 0, "lost_windows": 0,
            "tel": {"samples": window_s, "temp_max_mc": [51000], "temp_min_mc": [50000], "throttled": 0},
            "alert": {"threshold_ns": 1, "max_ns": max(lat_ns), "evidence": "evidence/x", "timerlat": "off",
                      "top": []} if alert else None}


def write_windows(folder: Path, windows: list[dict]) -> None:
    from datetime import datetime
    for w in windows:
        day = datetime.fromtimestamp(w["start_ns"] / S, tz=UTC).strftime("%Y-%m-%d")
        path = folder / "windows" / f"{day}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(w) + "\n")


def write_events(folder: Path, events: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "events.jsonl").open("a") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
