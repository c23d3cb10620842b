"""A CPU benchmark run (kind "bench") from what its steps left in raw/.

The runner ran the benchmark's step script (measure/bench.py writes it) as
its engine: one output file per step in raw/steps/NNN.out (.err: the
solver's JSON line, or stress-ng's metrics, read here too), a line
per finished step in raw/steps.log, the system's metadata after the last
step in raw/meta-after.json and the wall clock in raw/uptime.  The plan --
which step is which -- is in the run's config ("steps").  Here they become
RunResult.bench (summary.py documents it) and the warnings that say
what spoiled the figures, whether the benchmark ran its course or not.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from ..model import RunResult
from ..stats import SINCE_BOOT_SHIFT, THROTTLE_BITS
from ..store import rawfile
from .summary import spread

# OEIS A000170: ways to place N non-attacking queens on an N x N board.
# A solver that disagrees is broken, or runs on a board that miscalculates.
KNOWN_SOLUTIONS = {4: 2, 5: 10, 6: 4, 7: 40, 8: 92, 9: 352, 10: 724, 11: 2680, 12: 14200, 13: 73712,
                   14: 365596, 15: 2279184, 16: 14772512}
N_MAX = 16
SHORT_SOLVE_S = 1.0         # below this, ticks and scheduling noise weigh on a single solve
GROWTH_PER_N = 6            # each step of N costs ~5-7x more (measured for N = 10..16)
BUSY_FLOOR = 0.85           # CPU time / wall time per solver thread below this: CPUs were taken away


# stress-ng's metrics line (0.07 .. 0.18): "stress-ng: metrc: [pid] cpu  4024  2.00  2.20  0.00  2011.88  1829.95"
# ("info:" instead of "metrc:" before 0.15; newer versions append CPU % and RSS columns).
_METRIC_RE = re.compile(r"^stress-ng:\s+\w+:\s+\[\d+\]\s+(?P<stressor>[a-z][\w-]*)\s+(?P<rest>\d.*)$")
_NUMBER_RE = re.compile(r"^\d+(?:\.\d+)?$")


def parse_stress_ng_metrics(text: str, stressor: str = "cpu") -> dict[str, float]:
    """The --metrics-brief row of one stressor -> bogo ops, times and rates.

    Raises ValueError when the output has no such row (stress-ng failed, or
    printed a format this reader does not know)."""
    if "bogo ops" not in text:
        raise ValueError("no metrics table (was --metrics-brief given, and did the stressor run?)")
    for line in text.splitlines():
        m = _METRIC_RE.match(line.strip())
        if not m or m["stressor"] != stressor:
            continue
        numbers = m["rest"].split()
        if len(numbers) < 6 or not all(_NUMBER_RE.match(v) for v in numbers[:6]):
            continue
        ops, real_s, usr_s, sys_s, per_s, per_cpu_s = (float(v) for v in numbers[:6])
        return {"bogo_ops": int(ops), "real_s": real_s, "usr_s": usr_s, "sys_s": sys_s,
                "bogo_ops_per_s": per_s, "bogo_ops_per_cpu_s": per_cpu_s}
    raise ValueError(f"no metrics row for the '{stressor}' stressor")


def _throttled_during(before: str | None, after: str | None) -> list[str]:
    """Pi firmware throttling that happened during the benchmark: flags set
    now, or "since boot" flags that were not set before it."""
    if before is None or after is None:
        return []
    try:
        b, a = int(before, 16), int(after, 16)
    except ValueError:
        return []
    seen = (a & 0xF) | ((a & ~b) >> SINCE_BOOT_SHIFT & 0xF)
    return [name for bit, name in THROTTLE_BITS.items() if seen >> bit & 1]


def _warnings(n: int, system: dict, threads: list[int], usable: int, nqueens: list[dict], after: dict) -> list[str]:
    warn = []
    governors = [g for g in system.get("governors") or [] if g != "performance"]
    if governors:
        warn.append(f"CPU frequency governor {', '.join(governors)} changes the clock during the benchmark: "
                    "set 'performance' (cpupower frequency-set -g performance) on every kernel you compare")
    over = [t for t in threads if t > usable]
    if over:
        warn.append(f"{', '.join(map(str, over))} threads on {usable} usable CPUs measures oversubscription, "
                    f"not throughput: use --threads 1,all")
    flags = _throttled_during(system.get("throttled_hex"), after.get("throttled_hex"))
    if flags:
        warn.append(f"the board was throttled during the benchmark ({', '.join(flags)}), so its times are too slow: "
                    "cool it and use a proper power supply, then measure again")
    for e in nqueens:
        # A lone solver thread should hold its CPU the whole time; less means
        # something else ran there (other programs, a hypervisor's steal).
        busy = sorted(c / t for c, t in zip(e["cpu_ns"], e["elapsed_ns"]) if t)
        expected = min(e["threads"], usable)
        if busy and busy[len(busy) // 2] < BUSY_FLOOR * expected:
            warn.append(
                f"with {e['threads']} thread{'s' if e['threads'] > 1 else ''} the solver kept only "
                f"{busy[len(busy) // 2]:.2f} of {expected} CPU{'s' if expected > 1 else ''} busy: other programs "
                "(or a hypervisor) took CPU time, so these times are too slow: measure on an idle system"
            )
    medians = [m for e in nqueens if e["elapsed_ns"] and (m := spread(e["elapsed_ns"])["median_s"]) is not None]
    fastest = min(medians) if medians else None
    if fastest is not None and fastest < SHORT_SOLVE_S and n < N_MAX:
        better = min(N_MAX, n + math.ceil(math.log(SHORT_SOLVE_S / max(fastest, 1e-6), GROWTH_PER_N)))
        warn.append(
            f"a solve of N={n} takes only {fastest * 1000:.1f} ms here, so timer ticks and scheduling "
            f"noise weigh heavily on each: use --n {better} or more for solves of a second or longer"
        )
    return warn


def _read(raw: Path, rel: str) -> str:
    try:
        return rawfile.read_text(raw, rel) or ""
    except rawfile.RawFileError:
        return ""


def bench_from_steps(result: RunResult, raw: Path) -> tuple[str, list[str]]:
    """Fill result.bench from the step outputs; (engine state, warnings)."""
    cfg = result.config
    n, steps = cfg["n"], cfg["steps"]
    threads = list(cfg["threads"])
    done = len(_read(raw, "steps.log").splitlines())
    nq = {
        t: {"threads": t, "solutions": None, "elapsed_ns": [], "cpu_ns": [], "warmup_elapsed_ns": []} for t in threads
    }
    stress_runs, notes = [], list(cfg.get("notes") or [])  # what was known at the start (stress-ng missing)
    for i, s in enumerate(steps[:done]):
        out = _read(raw, f"steps/{i + 1:03d}.out") + _read(raw, f"steps/{i + 1:03d}.err")
        if s["kind"] == "nqueens":
            doc = json.loads(out.strip().splitlines()[-1])
            entry = nq[s["threads"]]
            if doc["solutions"] != KNOWN_SOLUTIONS[n] and not any("miscalculates" in w for w in notes):
                notes.append(
                    f"the solver counted {doc['solutions']} solutions for N={n}, not {KNOWN_SOLUTIONS[n]}: "
                    "this build is broken or the board miscalculates (overclocked? under-voltage?)"
                )
            entry["solutions"] = doc["solutions"]
            if s.get("warmup"):
                entry["warmup_elapsed_ns"].append(doc["elapsed_ns"])
            else:
                entry["elapsed_ns"].append(doc["elapsed_ns"])
                entry["cpu_ns"].append(doc["cpu_ns"])
        else:
            try:
                stress_runs.append({"threads": s["threads"], **parse_stress_ng_metrics(out)})
            except ValueError as e:
                notes.append(
                    f"could not read stress-ng's metrics with {s['threads']} workers ({e}): "
                    "pass --stress-s 0 to go without them"
                )
    nqueens = [nq[t] for t in threads]
    stress = cfg.get("stress")
    after: dict[str, Any] = {}
    try:
        after = json.loads(_read(raw, "meta-after.json") or "{}")
    except json.JSONDecodeError:
        pass
    result.bench = {
        "benchmark": "nqueens",
        "n": n,
        "solutions_expected": KNOWN_SOLUTIONS[n],
        "repeat": cfg["repeat"],
        "warmup": cfg["warmup"],
        "nqueens": nqueens,
        "stress_ng": {**stress, "runs": stress_runs} if stress else None,
        "system_after": {k: after.get(k) for k in ("throttled_hex", "loadavg", "cpufreq")},
    }
    clock = [float(v) for v in _read(raw, "uptime").split()[:2] if v.replace(".", "", 1).isdigit()]
    if len(clock) == 2:
        result.duration_s = clock[1] - clock[0]
    state = "complete" if done == len(steps) and not any("miscalculates" in w for w in notes) else "killed"
    if done < len(steps):
        notes.insert(
            0,
            f"the benchmark ended after {done} of its {len(steps)} steps: its figures cover only those; "
            "repeat it for a whole run",
        )
    elif state != "complete":
        state = "failed"
    notes += _warnings(n, result.system, threads, cfg["usable_cpus"], nqueens, after)
    return state, notes
