"""cyclictest's own outputs, read into the result model.

cyclictest measures whole microseconds (it truncates), so a histogram bucket
"k" becomes the single value k * 1000 ns.  Its --json file has no overflow
field: samples beyond the -h range are the thread's cycles minus the
histogram's sum.  rt-tests 2.x spells some keys with a trailing colon
("cmdline:", "rt_test_version:"); both spellings are accepted.
"""

from __future__ import annotations

import re
from typing import Any

from ..hist import Histogram
from ..model import CpuResult

# The per-thread status line; a non-quiet run wraps it in terminal escapes.
STATUS_RE = re.compile(
    r"T:\s*(?P<thread>\d+)\s*\(\s*(?P<pid>\d+)\)\s*P:\s*(?P<prio>\d+)\s*I:\s*(?P<interval>\d+)\s*"
    r"C:\s*(?P<cycles>\d+)\s*Min:\s*(?P<min>\d+)\s*Act:\s*(?P<act>\d+)\s*Avg:\s*(?P<avg>\d+)\s*Max:\s*(?P<max>\d+)"
)


def json_field(doc: dict[str, Any], name: str) -> Any:
    return doc[name] if name in doc else doc.get(name + ":")


def cpus_from_json(doc: dict[str, Any], range_us: int | None, unit_ns: int = 1000) -> list[CpuResult]:
    """Per-thread results; range_us is the -h size (None: no histogram asked for)."""
    out = []
    threads = doc.get("thread") or {}
    for key in sorted(threads, key=int):
        t = threads[key]
        cycles = int(t.get("cycles", 0))
        hist_doc = t.get("histogram") or {}
        buckets = [[int(k) * unit_ns, int(k) * unit_ns, int(v)] for k, v in hist_doc.items() if int(v)]
        in_hist = sum(b[2] for b in buckets)
        hist = Histogram.from_buckets(
            buckets,
            overflow=cycles - in_hist,
            range_max_ns=(range_us - 1) * unit_ns if range_us else -1,
        )
        out.append(
            CpuResult(
                cpu=int(t.get("cpu", key)),
                count=cycles,
                min_ns=int(t["min"]) * unit_ns if cycles else None,
                max_ns=int(t["max"]) * unit_ns if cycles else None,
                sum_ns=round(float(t["avg"]) * unit_ns * cycles) if cycles else None,
                overruns=None,
                hist=hist,
            )
        )
    return out


def last_status(text: str) -> dict[int, dict[str, int]]:
    """Each thread's last status line (a run killed before writing JSON), with
    the worst Max and lowest Min of all its lines that counted wake-ups: a
    thread's max never falls, so a lower later one is a redraw gone wrong,
    and the worse value is the one that was measured."""
    latest: dict[int, dict[str, int]] = {}
    for m in STATUS_RE.finditer(text):
        status = {k: int(v) for k, v in m.groupdict().items()}
        before = latest.get(status["thread"])
        if before and before["cycles"] and status["cycles"]:
            status["max"] = max(status["max"], before["max"])
            status["min"] = min(status["min"], before["min"])
        elif before and before["cycles"] and not status["cycles"]:
            status = before  # a line of a thread that has not counted yet says nothing new
        latest[status["thread"]] = status
    return latest


def cpus_from_status(text: str, cpus: list[int], unit_ns: int = 1000) -> list[CpuResult]:
    """Counts, min, avg and max without a histogram: every value is 'unknown'.

    unit_ns is 1 for a run with -N (values in ns)."""
    out = []
    for thread, s in sorted(last_status(text).items()):
        n = s["cycles"]
        out.append(
            CpuResult(
                cpu=cpus[thread] if thread < len(cpus) else thread,
                count=n,
                min_ns=s["min"] * unit_ns if n else None,
                max_ns=s["max"] * unit_ns if n else None,
                sum_ns=s["avg"] * unit_ns * n if n else None,
                overruns=None,
                hist=Histogram.from_buckets([], overflow=n, range_max_ns=-1),
            )
        )
    return out
