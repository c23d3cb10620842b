"""The shape a stored result must have before rtforge uses it.

A result.json is read from a folder anyone may have edited, truncated or
copied in: every field that rtforge reads is checked here, once, so that
the store can list a damaged run as damaged (why, where) instead of failing
somewhere deep in a table, a plot or the index.  ``check_result`` raises
``Damaged`` naming the first field that is wrong.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Any count or time in ns fits int64 with room; numpy and SQLite need that.
INT_MAX = 2**63 - 1
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


class Damaged(ValueError):
    """A stored result does not have the shape rtforge writes; the message says where."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and -INT_MAX <= v <= INT_MAX)


def INT(v):  # noqa: N802 -- the checkers read as types in the tables below
    return _is_int(v) and -INT_MAX <= v <= INT_MAX


def COUNT(v):  # noqa: N802
    return _is_int(v) and 0 <= v <= INT_MAX


def NUM(v):  # noqa: N802
    return _is_num(v)


def SUM(v):  # noqa: N802 -- a sum of ns may pass int64 (count x avg of a hostile import), not 1e40
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < 1e40


def STR(v):  # noqa: N802
    return isinstance(v, str)


def BOOL(v):  # noqa: N802
    return isinstance(v, bool)


def DICT(v):  # noqa: N802
    return isinstance(v, dict)


def LIST(v):  # noqa: N802
    return isinstance(v, list)


def opt(check):
    return lambda v: v is None or check(v)


def list_of(check):
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


def dict_of(check):
    return lambda v: isinstance(v, dict) and all(isinstance(k, str) and check(x) for k, x in v.items())


def _fields(where: str, d: Any, spec: dict[str, Any]) -> None:
    if not isinstance(d, dict):
        raise Damaged(f"{where} is {type(d).__name__}, not an object")
    for key, check in spec.items():
        if key in d and not check(d[key]):
            raise Damaged(f"{where}.{key} has the wrong type or value ({_short(d[key])})")


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:39] + "…"


TOP = {
    "run_id": STR, "engine": STR, "state": STR, "host": STR, "start_time": STR,
    "kind": lambda v: v in ("latency", "bench"),   # what a run is decides how every command reads it
    "label": opt(STR), "end_reason": opt(STR), "reproducer": opt(STR), "stored_at": opt(STR),
    "duration_s": opt(lambda v: _is_num(v) and v >= 0),
    "requested": DICT, "config": DICT, "system": DICT,
    "engine_argv": list_of(STR), "warnings": list_of(STR),
    "cpus": LIST, "top_spikes": list_of(lambda s: isinstance(s, list) and len(s) == 3 and all(INT(x) for x in s)),
    "series": opt(DICT), "telemetry": opt(DICT), "source": opt(DICT), "owner": opt(DICT), "bench": opt(DICT),
    "trace": opt(DICT),
}
REQUIRED = ("run_id", "engine", "state", "host", "start_time")
# Only what rtforge reads as a given type (the index, joins, arithmetic); the
# rest is shown as it is, whatever it is.
CONFIG = {"loads": opt(list_of(STR)), "cpus": opt(list_of(INT)), "interval_us": opt(NUM),
          "histogram_us": opt(COUNT), "settle_s": opt(NUM)}
SYSTEM = {
    "kernel_release": opt(STR), "kernel_version": opt(STR), "preempt_model": opt(STR), "board_model": opt(STR),
    "cpu_model": opt(STR), "machine": opt(STR), "cmdline": opt(STR), "hostname": opt(STR),
    "governors": list_of(STR),
}
CPU = {
    "cpu": INT, "count": COUNT, "min_ns": opt(COUNT), "max_ns": opt(COUNT), "sum_ns": opt(SUM),
    "overruns": opt(COUNT), "spikes": opt(COUNT), "spikes_dropped": COUNT, "hist": DICT,
}
def _buckets(v: Any) -> bool:
    """[lo, hi, count] rows of counts, lo <= hi: list_of(...) spelled out as
    one loop, since a run holds thousands and rebuilding a store's index
    checks them all (``type(x) is int``: JSON's ints, never a bool)."""
    if not isinstance(v, list):
        return False
    for b in v:
        if type(b) is not list or len(b) != 3:
            return False
        lo, hi, n = b
        if not (type(lo) is int and type(hi) is int and type(n) is int and 0 <= lo <= hi <= INT_MAX
                and 0 <= n <= INT_MAX):
            return False
    return True


HIST = {
    "buckets": _buckets,
    "overflow": opt(COUNT), "range_max_ns": opt(INT),   # overflow None: unknown (format 5: a CSV import)
}
SOURCE = {"file": opt(STR), "sha256": opt(STR), "format": opt(STR), "start_time_from": opt(STR)}
OWNER = {"pid": COUNT, "start_ticks": opt(INT), "boot_id": opt(STR)}
SERIES = {"t_s": list_of(NUM), "cpus": list_of(INT), "count": list_of(list_of(opt(NUM))),
          "max_ns": list_of(list_of(opt(NUM))), "overruns": list_of(list_of(opt(NUM))),
          "irqs": opt(list_of(list_of(opt(NUM)))), "irq_thread_pct": opt(list_of(opt(NUM))),
          "irq_thread_top": opt(list_of(opt(STR))), "irq_thread_top_pct": opt(list_of(opt(NUM)))}
TELEMETRY = {"t_s": list_of(NUM), "temp_mc": dict_of(list_of(opt(NUM))), "freq_khz": dict_of(list_of(opt(NUM))),
             "throttled": list_of(opt(COUNT)), "load1": list_of(opt(NUM))}
TRACE = {"spikes": list_of(DICT), "rtla_runs": opt(COUNT), "limit_reached": opt(BOOL)}
TRACE_SPIKE = {"cpu": INT, "t_s": opt(NUM), "total_us": opt(NUM), "kind": opt(STR), "culprit": opt(STR)}
BENCH = {"n": opt(COUNT), "repeat": opt(COUNT), "nqueens": opt(list_of(DICT)), "stress_ng": opt(DICT)}
NQUEENS = {"threads": COUNT, "solutions": COUNT, "elapsed_ns": opt(list_of(NUM)), "cpu_ns": opt(list_of(NUM))}
STRESS = {"method": opt(STR), "version": opt(STR), "duration_s": opt(NUM),
          "runs": opt(list_of(lambda r: DICT(r) and COUNT(r.get("threads"))
                              and all(_is_num(v) for k, v in r.items() if k != "threads")))}


def _same_length(where: str, t: list, columns: list[list]) -> None:
    if any(len(c) != len(t) for c in columns):
        raise Damaged(f"{where}: a column is not as long as its t_s")


def check_result(d: Any) -> None:
    """Raise Damaged unless d has the shape of a stored result (format_version aside)."""
    if not isinstance(d, dict):
        raise Damaged(f"it holds {type(d).__name__}, not a result object")
    for key in REQUIRED:
        if key not in d:
            raise Damaged(f"it lacks '{key}'")
    _fields("result", d, TOP)
    if not RUN_ID_RE.fullmatch(d["run_id"]):
        raise Damaged(f"its run_id {_short(d['run_id'])} is not a run id (letters, digits, '.', '_', '+', '-')")
    for name, spec in (("config", CONFIG), ("system", SYSTEM)):
        _fields(name, d.get(name, {}), spec)
    _check_cpus(d.get("cpus", []))
    for name, spec in (("source", SOURCE), ("owner", OWNER), ("bench", BENCH)):
        if d.get(name) is not None:
            _fields(name, d[name], spec)
    if d.get("owner") is not None and "pid" not in d["owner"]:
        raise Damaged("owner lacks 'pid'")
    _check_bench(d.get("bench") or {})
    if d.get("trace") is not None:
        _check_trace(d["trace"])
    if d.get("series") is not None:
        _check_series(d["series"])
    if d.get("telemetry") is not None:
        _check_telemetry(d["telemetry"])


def _check_cpus(cpus: list) -> None:
    for i, c in enumerate(cpus):
        _fields(f"cpus[{i}]", c, CPU)
        for key in ("cpu", "count", "hist"):
            if key not in c:
                raise Damaged(f"cpus[{i}] lacks '{key}'")
        _fields(f"cpus[{i}].hist", c["hist"], HIST)
        if "buckets" not in c["hist"]:
            raise Damaged(f"cpus[{i}].hist lacks 'buckets'")
        if sum(b[2] for b in c["hist"]["buckets"]) + (c["hist"].get("overflow") or 0) > INT_MAX:
            raise Damaged(f"cpus[{i}].hist holds more samples than any run can have")


def _check_bench(bench: dict) -> None:
    for i, e in enumerate(bench.get("nqueens") or []):
        _fields(f"bench.nqueens[{i}]", e, NQUEENS)
        for key in ("threads", "solutions"):
            if key not in e:
                raise Damaged(f"bench.nqueens[{i}] lacks '{key}'")
    if bench.get("stress_ng") is not None:
        _fields("bench.stress_ng", bench["stress_ng"], STRESS)


def _check_trace(trace: dict) -> None:
    _fields("trace", trace, TRACE)
    for i, sp in enumerate(trace.get("spikes") or []):
        _fields(f"trace.spikes[{i}]", sp, TRACE_SPIKE)
        if "cpu" not in sp:
            raise Damaged(f"trace.spikes[{i}] lacks 'cpu'")


def _check_series(s: dict) -> None:
    _fields("series", s, SERIES)
    t = s.get("t_s") or []
    cols = [c for key in ("count", "max_ns", "overruns", "irqs") for c in s.get(key) or []]
    cols += [s[key] for key in ("irq_thread_pct", "irq_thread_top", "irq_thread_top_pct") if s.get(key)]
    _same_length("series", t, cols)
    if len(s.get("max_ns") or []) != len(s.get("cpus") or []):
        raise Damaged("series: max_ns does not have one column per CPU")


def _check_telemetry(tel: dict) -> None:
    _fields("telemetry", tel, TELEMETRY)
    t = tel.get("t_s") or []
    cols = [*(tel.get("temp_mc") or {}).values(), *(tel.get("freq_khz") or {}).values()]
    cols += [c for c in (tel.get("throttled"), tel.get("load1")) if c]
    _same_length("telemetry", t, cols)
