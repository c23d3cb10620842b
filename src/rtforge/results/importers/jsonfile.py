"""cyclictest's ``--json=FILE`` (rt-tests 2.x).

Keys: ``file_version``, ``cmdline`` (2.x spells it ``cmdline:``),
``rt_test_version`` (or ``rt_test_version:``), ``start_time``/``end_time``
(RFC 2822, whole seconds), ``return_code``, ``sysinfo`` (uname fields and
``realtime``), ``num_threads``, ``resolution_in_ns`` (1 with -N), and per
thread ``histogram`` (non-empty buckets only; absent without -h), ``cycles``,
``min``, ``max``, ``avg`` (two decimals), ``cpu``, ``node``.  The histogram
size is only in the command line.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from ..raw.cyclictest import cpus_from_json, json_field
from ..system import describe
from .cmdline import DEFAULT_INTERVAL_US, parse_cmdline, thread_cpus
from .cmdline import duration_s as _duration_s
from .cmdline import number as _number
from .common import (
    MAX_VALUE,
    NS,
    NUM,
    US,
    Parsed,
    Source,
    check_extremes,
    no_histogram_warning,
    nsecs_warning,
)


def _line_of(src: Source, needle: str) -> int:
    text = src.text()
    at = text.find(needle)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_VALUE


def _check_thread(src: Source, key: str, t: Any) -> None:
    line = _line_of(src, f'"{key}"')
    if not re.fullmatch(NUM, key) or not isinstance(t, dict):
        raise src.error(line, f"expected thread entries like \"0\": {{\"cycles\": ...}}, found {key!r}")
    for name in ("cycles", "min", "max"):
        if not _count(t.get(name)):
            raise src.error(line, f"thread {key} needs '{name}' as a whole number from 0 to {MAX_VALUE}")
    avg = t.get("avg")
    if isinstance(avg, bool) or not isinstance(avg, (int, float)) or not (math.isfinite(avg) and 0 <= avg <= MAX_VALUE):
        raise src.error(line, f"thread {key} needs 'avg' as a number from 0 to {MAX_VALUE}")
    cpu = t.get("cpu", 0)
    if isinstance(cpu, bool) or not isinstance(cpu, int) or not -1 <= cpu < 1 << 20:
        raise src.error(line, f"thread {key} has 'cpu' {cpu!r}; expected a CPU number")
    hist = t.get("histogram", {})
    if not isinstance(hist, dict) or not all(re.fullmatch(NUM, k) and _count(v) for k, v in hist.items()):
        raise src.error(line, f"thread {key}'s 'histogram' must map buckets to counts, like {{\"17\": 10}}")
    if sum(hist.values()) > t["cycles"]:
        raise src.error(line, f"thread {key}'s histogram holds {sum(hist.values())} samples, more than its "
                              f"{t['cycles']} cycles; the file is damaged")


def _system(doc: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    info = doc.get("sysinfo")
    if not isinstance(info, dict):
        return {}, None
    fields = ("sysname", "nodename", "release", "version", "machine")
    uname = {k: info[k] for k in fields if isinstance(info.get(k), str)}
    realtime = info.get("realtime") if isinstance(info.get("realtime"), int) else None
    system = describe({"uname": uname, "realtime": realtime})
    # Keep the file's own words, but not as "uname": that key marks the probe's
    # metadata, whose missing cpu_dma_latency would raise a false warning.
    del system["uname"]
    system["sysinfo"] = info
    return system, uname.get("nodename")


def _times(doc: dict[str, Any]) -> tuple[str | None, float | None]:
    """The run's start (ISO 8601, UTC) and length; None for what the file
    does not say sensibly (a number, a year 9999 that leaves the calendar in UTC)."""
    def parse(key):
        value = doc.get(key)
        if not isinstance(value, str) or len(value) > 100:
            return None
        try:
            t = parsedate_to_datetime(value)
            t = t if t.tzinfo else t.replace(tzinfo=UTC)
            return t.astimezone(UTC)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    start, end = parse("start_time"), parse("end_time")
    duration = (end - start).total_seconds() if start and end and end >= start else None
    return (start.isoformat(timespec="seconds") if start else None), duration


def _load(src: Source) -> tuple[dict, dict]:
    """(the document, its threads), each thread checked."""
    try:
        doc = json.loads(src.text())
    except json.JSONDecodeError as e:
        raise src.error(e.lineno, f"not valid JSON ({e.msg}); expected the file cyclictest --json=FILE "
                                  "writes") from None
    except RecursionError:
        raise src.error(1, "the JSON is nested too deeply to be cyclictest's --json output") from None
    threads = doc.get("thread") if isinstance(doc, dict) else None
    if not isinstance(threads, dict) or not threads:
        raise src.error(_line_of(src, '"thread"'), "expected cyclictest's --json results: an object whose 'thread' "
                                                   "object holds one entry per thread")
    for key, t in threads.items():
        _check_thread(src, key, t)
    num = doc.get("num_threads")
    if num is not None and num != len(threads):
        raise src.error(_line_of(src, '"num_threads"'), f"'num_threads' is {num!r} but {len(threads)} threads are "
                                                        "listed; the file is damaged")
    return doc, threads


def _warnings(doc: dict, size: int | None, unit: int, cpus: list, any_hist: bool) -> list[str]:
    """What the file leaves unsaid, or says went wrong."""
    warnings = []
    if size is None and any_hist:
        warnings.append("the file does not say how large the histogram was (its command line has no -h), so "
                        "samples missing from it are counted as beyond its range; import a file with its cmdline")
    elif size is None:
        warnings.append(no_histogram_warning())
    if unit == NS:
        how = "its resolution_in_ns" if doc.get("resolution_in_ns") == 1 else "-N in its command line"
        overflow = sum(c.hist.overflow for c in cpus)
        warnings.append(nsecs_warning(how, size, overflow, sum(c.count for c in cpus)) if size else nsecs_warning(how))
    rc = doc.get("return_code")
    if isinstance(rc, int) and rc != 0:
        warnings.append(f"cyclictest reported return code {rc}, so the run may have failed or stopped early: "
                        "check the output it printed before trusting these figures")
    return warnings


def _check_histograms(src: Source, threads: dict, size: int | None, unit: int) -> None:
    """Each thread's histogram against the size its command line asked for, and
    against the thread's own cycles, min and max: a damaged file is refused at its line."""
    for key, t in threads.items():
        counts = {int(k): v for k, v in (t.get("histogram") or {}).items()}
        line = _line_of(src, f'"{key}"')
        if size is not None and counts and max(counts) >= size:
            raise src.error(line, f"thread {key}'s histogram has bucket {max(counts)}, beyond the {size} buckets "
                                  "its command line asked for; the file is damaged")
        if t["cycles"]:
            overflow = t["cycles"] - sum(counts.values())
            check_extremes(src, line, line, int(key), counts, overflow, t["min"], t["max"], size,
                           "ns" if unit == NS else "µs")


def _file_config(doc: dict, threads: dict, cpus: list, pinned: bool, unit: int) -> dict[str, Any]:
    """The run's config as the file itself says it: threads, resolution, where they ran, rt-tests' version."""
    config: dict[str, Any] = {"threads": len(threads), "resolution_ns": unit}
    if pinned:
        config["cpus"] = sorted({c.cpu for c in cpus})
    else:
        config["cpu_is_thread"] = True
    version = json_field(doc, "rt_test_version")
    if isinstance(version, str):
        config["rt_tests_version"] = version
    return config


def _asked(opts: dict, unit: int, size: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the config, what was requested) as the recorded command line asked for them."""
    config: dict[str, Any] = {"interval_us": _number(opts.get("interval")) or DEFAULT_INTERVAL_US}
    if (prio := _number(opts.get("priority"))) is not None:
        config["priority"] = prio
    if (policy := opts.get("policy") or ("fifo" if prio else None)) is not None:
        config["policy"] = policy
    if size is not None:
        config["histogram_us" if unit == US else "histogram_ns"] = size
    for opt, key in (("spike", "spike_threshold_ns"), ("breaktrace", "break_threshold_ns")):
        if (v := _number(opts.get(opt))) is not None:
            config[key] = v * unit
    return config, {"duration_s": _duration_s(opts.get("duration")), "loops": _number(opts.get("loops"))}


def read_json(src: Source) -> Parsed:
    doc, threads = _load(src)
    cmdline = json_field(doc, "cmdline")
    cmdline = cmdline if isinstance(cmdline, str) else None
    opts = parse_cmdline(cmdline) if cmdline else {}
    unit = NS if doc.get("resolution_in_ns") == 1 or "nsecs" in opts else US
    size = _number(opts.get("histogram") or opts.get("histofall"))
    any_hist = any(t.get("histogram") for t in threads.values())
    _check_histograms(src, threads, size, unit)
    cpus = cpus_from_json(doc, size, unit_ns=unit)
    pinned = thread_cpus(opts, len(cpus))
    warnings = _warnings(doc, size, unit, cpus, any_hist)
    system, host = _system(doc)
    start, duration = _times(doc)
    if pinned is None:
        # Not pinned (or no command line to say so): its "cpu" is the thread's number, not where it ran.
        for i, c in enumerate(cpus):
            c.cpu = i
    config = _file_config(doc, threads, cpus, pinned is not None, unit)
    requested: dict[str, Any] = {}
    if cmdline:
        asked, requested = _asked(opts, unit, size)
        config.update(asked)
    return Parsed(
        format="cyclictest-json", cpus=cpus, config=config, system=system, requested=requested, warnings=warnings,
        command_line=cmdline, host=host, start_time=start,
        duration_s=duration,
    )
