"""rtla timerlat's auto-analysis, read into one record per spike.

rtla (tools/tracing/rtla/src/timerlat_aa.c, rtla 6.3 and later) prints,
for each CPU that hit the stop threshold, a block like this (tabs and
column widths vary; the parser goes by the labels):

    ## CPU 23 hit stop tracing, analyzing it ##
      Previous IRQ interference:            up to      1.20 us   (optional)
      IRQ handler delay:    (exit from idle)      27.49 us (65.52 %)
      IRQ latency:                                28.13 us
      Timerlat IRQ duration:                       9.59 us (22.85 %)
      Blocking thread:                             3.79 us (9.03 %)
                         objtool:49256             3.79 us
        Blocking thread stack trace
                    -> timerlat_irq
                    -> ...
      NMI interference / IRQ interference / Softirq interference /
      Thread interference    X us (P %), each followed by its items
                       NAME:NUMBER             X us
    ------------------------------------------------------------------------
      Thread latency:                             41.96 us (100%)

A stop on the IRQ latency prints "Blocking thread:" with no time and the
thread alone on the next line, and ends with "IRQ latency:" as the total.
The runner (data/runner.sh `trace`) keeps each rtla run's output in
raw/trace/N.out and "N START END STATUS" (uptimes) in raw/trace/index.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...units import format_us
from ..store import rawfile

MAX_TRACE_FILES = 1000

_HIT = re.compile(r"^## CPU (\d+) hit stop tracing")
# signed: rtla prints a latency beyond its range as a negative number (seen in a TCG guest: a 2.2 s
# spike printed as -2081686.34 us, its shares negative too); such a block is read, and blames no one
_NUM = r"(-?[0-9]+(?:\.[0-9]+)?)"
_PART = re.compile(rf"^\s*(IRQ handler delay|IRQ latency|Timerlat IRQ duration|Blocking thread|NMI interference|"
                   rf"IRQ interference|Softirq interference|Thread interference):?\s*(\(exit from idle\))?\s*"
                   rf"(?:{_NUM} us)?(?:\s*\({_NUM} ?%\))?\s*$")
_PREV = re.compile(rf"^\s*Previous IRQ interference:\s*up to\s+{_NUM} us")
_TOTAL = re.compile(rf"^\s*(Thread|IRQ) latency:\s*{_NUM} us \(100%\)")
_ITEM = re.compile(rf"^\s*(.+?):(-?[0-9]+)\s*(?:{_NUM} us)?\s*$")
_FRAME = re.compile(r"^\s*-> (\S+)")
_IDLE = re.compile(rf"Max timerlat IRQ latency from idle: {_NUM} us in cpu (\d+)")

# The frames of the timer interrupt's own entry, on x86, arm64 and arm: the
# interrupted code -- what ran with the delay -- is the first frame after them.
_ENTRY = re.compile(r"^(timerlat_irq|__hrtimer_run_queues|hrtimer_interrupt|.*_interrupt|.*sysvec.*|"
                    r".*_irq_handler\w*|_*el[01]\w*irq\w*|gic_\w+|handle_\w*irq\w*|generic_handle_\w+|"
                    r"call_on_irq_stack|do_interrupt_handler|arch_timer_handler\w*|__irq_\w+|irq_exit\w*|"
                    r"__handle_domain_irq|bcm2836_\w+|handle_domain_irq|irq_enter\w*)$")

_KEYS = {"IRQ handler delay": "irq_delay", "Timerlat IRQ duration": "irq_duration",
         "Blocking thread": "blocking", "NMI interference": "nmi", "IRQ interference": "irq",
         "Softirq interference": "softirq", "Thread interference": "thread"}


def interrupted_frame(stack: list[str]) -> str | None:
    """The function the timer interrupt found running (the first frame past its entry)."""
    for frame in stack:
        if not _ENTRY.match(frame):
            return frame
    return None


def parse(text: str) -> list[dict[str, Any]]:
    """Every analysed spike in one rtla output, in the order rtla printed them."""
    spikes: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    items: list | None = None   # where NAME:NUMBER lines go (the thread, or an interference's list)
    for line in text.splitlines():
        if m := _HIT.match(line):
            cur = {"cpu": int(m.group(1)), "kind": None, "total_us": None, "parts": {}, "blocking": None,
                   "stack": [], "interference": {}, "previous_irq_us": None, "exit_from_idle": False}
            spikes.append(cur)
            items = None
            continue
        if cur is None:
            continue
        if m := _TOTAL.match(line):
            cur["kind"], cur["total_us"] = m.group(1).lower(), float(m.group(2))
            cur = None
            continue
        if m := _PREV.match(line):
            cur["previous_irq_us"] = float(m.group(1))
            continue
        if m := _PART.match(line):
            label, idle, us, pct = m.groups()
            items = _part(cur, items, label, idle, us, pct)
            continue
        if m := _FRAME.match(line):
            cur["stack"].append(m.group(1))
            continue
        if "stack trace" in line or "stacktrace" in line:
            continue
        if (m := _ITEM.match(line)) and not line.lstrip().startswith("-"):
            _item(cur, items, m.group(1).strip(), int(m.group(2)), m.group(3))
    return [s for s in spikes if s["total_us"] is not None]  # a block cut off by a kill is not a result


def _part(cur: dict[str, Any], items: list | None, label: str, idle: str | None, us: str | None,
          pct: str | None) -> list | None:
    """One line of the breakdown ('IRQ handler delay: X us (P %)') into the spike; returns where
    the NAME:NUMBER lines after it go: an interference's list, or none (the blocking thread's
    line sets the thread itself, other parts list nothing)."""
    if label == "IRQ latency":
        cur["irq_latency_us"] = float(us) if us else None
        return items
    key = _KEYS[label]
    cur["parts"][key] = {"us": float(us) if us else None, "pct": float(pct) if pct else None}
    if key == "irq_delay":
        cur["exit_from_idle"] = bool(idle)
    if key == "blocking":
        cur["blocking"] = {}  # the thread follows on its own line
        return None
    return cur["interference"].setdefault(key, []) if key in ("irq", "softirq", "thread") else None


def _item(cur: dict[str, Any], items: list | None, name: str, number: int, us: str | None) -> None:
    """A NAME:NUMBER line: the blocking thread when one is awaited, else an entry of the interference above it."""
    if cur["blocking"] == {}:
        cur["blocking"] = {"comm": name, "pid": number, "us": float(us) if us else None}
    elif items is not None:
        items.append({"name": name, "number": number, "us": float(us) if us else None})


def idle_exit(text: str) -> dict[str, Any] | None:
    """rtla's 'Max timerlat IRQ latency from idle: X us in cpu N', the worst of them."""
    found = [{"us": float(m.group(1)), "cpu": int(m.group(2))} for m in _IDLE.finditer(text)]
    return max(found, key=lambda f: f["us"]) if found else None


def culprit(s: dict[str, Any]) -> str:
    """Where the spike's time went, in one line: the largest part, and who."""
    parts = {k: v["us"] for k, v in s["parts"].items() if v.get("us") is not None}
    b = s.get("blocking") or {}
    who = f"{b['comm']}:{b['pid']}" if b.get("comm") else "an unknown thread"
    frame = interrupted_frame(s["stack"])
    where = f" in {frame}" if frame else ""
    if s["total_us"] is not None and s["total_us"] < 0:
        return (f"no one to blame: rtla printed a negative latency ({_us(s['total_us'])}), a figure out of its "
                f"range, not a time")
    over = {k: v for k, v in parts.items() if s["total_us"] is not None and v > s["total_us"]}
    if over:  # the parts of a latency cannot exceed it: the clock jumped (seen under emulation)
        k = max(over, key=lambda name: over[name])
        return (f"no one to blame: rtla's breakdown does not add up ({k.replace('_', ' ')} {_us(over[k])} "
                f"in a {_us(s['total_us'])} latency), a clock jump rather than a thread")
    if s["kind"] == "irq" or (parts and max(parts, key=lambda name: parts[name]) == "irq_delay"):
        delay = parts.get("irq_delay")
        if s.get("exit_from_idle"):  # rtla's own verdict: the CPU was waking from a deep idle state
            return f"timer IRQ {_us(delay)} late leaving idle{where}"
        return f"timer IRQ delayed {_us(delay)}: IRQs off in {who}{where}"
    if not parts:
        return "no breakdown"
    top = max(parts, key=lambda name: parts[name])
    if top == "blocking":
        return f"{who} kept the CPU {_us(parts[top])}{where}"
    if top == "irq_duration":
        return f"the timer IRQ handler itself took {_us(parts[top])}"
    if top == "nmi":
        return f"NMIs took {_us(parts[top])}"
    listed = sorted(s["interference"].get(top) or [], key=lambda i: -(i["us"] or 0))
    names = ", ".join(f"{i['name']}:{i['number']} {_us(i['us'])}" for i in listed[:3])
    what = {"irq": "IRQ handlers", "softirq": "softirqs", "thread": "other threads"}[top]
    return f"{what} took {_us(parts[top])}" + (f" ({names})" if names else "")


def _us(v: float | None) -> str:
    return format_us(None if v is None else v * 1000, unit=True, unknown="?")


def read_run(raw: Path) -> dict[str, Any] | None:
    """The trace of a run's raw/ folder: its spikes, each with the time into
    the run (seconds, from the runner's start uptime) and a culprit line."""
    folder = raw / "trace"
    if folder.is_symlink() or not folder.is_dir():
        return None
    try:
        started = float((rawfile.read_text(raw, "runner/started") or "").split()[0])
    except (rawfile.RawFileError, ValueError, IndexError):
        started = None
    index: dict[int, float] = {}
    status: dict[int, str] = {}
    for line in (rawfile.read_text(raw, "trace/index") or "").splitlines():
        f = line.split()
        if len(f) == 4 and f[0].isdigit():
            status[int(f[0])] = f[3]
            try:
                index[int(f[0])] = float(f[2])
            except ValueError:
                continue
    # far more analyses than a run makes (measure/trace.py's limit is 50): a bound on what is read
    runs = sorted(int(n[:-4]) for n in rawfile.names(raw, "trace") if n.endswith(".out") and n[:-4].isdigit()
                  and len(n) < 12)[:MAX_TRACE_FILES]
    spikes = []
    idle = None
    failed = None
    for n in runs:
        text = rawfile.read_text(raw, f"trace/{n}.out") or ""
        if status.get(n, "0") != "0" and "hit stop tracing" not in text:
            first = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
            failed = f"rtla exited with status {status[n]} ({first[:200]}): see raw/trace/{n}.out"
        if m := _IDLE.search(text):
            v = float(m.group(1))
            if idle is None or v > idle["us"]:
                idle = {"us": v, "cpu": int(m.group(2))}
        for s in parse(text):
            end = index.get(n)
            s["t_s"] = round(end - started, 1) if end is not None and started is not None else None
            s["culprit"] = culprit(s)
            spikes.append(s)
    limit = "limit" in (rawfile.read_text(raw, "trace.out") or "")
    return {"rtla_runs": len(runs), "spikes": spikes, "max_idle_exit": idle, "limit_reached": limit,
            "failed": failed}

