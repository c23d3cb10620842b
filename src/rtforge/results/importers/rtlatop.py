"""``rtla timerlat top``'s output (tools/tracing/rtla/src/timerlat_top.c,
rtla 5.17 to 7.x).

Each refresh (every second unless -q, which prints once at the end) is a
block, preceded by ``ESC c`` (a terminal reset) when not quiet:

* ``Timer Latency`` centred; ``%3d %02d:%02d:%02d   |  IRQ Timer Latency
  (us) | Thread Timer Latency (us)`` -- the duration (days, h:m:s) and the
  unit (``ns`` with -n) -- and ``| Ret user Timer Latency (us)`` with
  user-space threads; ``CPU COUNT | cur min avg max | cur min avg max``;
  colour escapes around the headers on a terminal;
* per CPU that saw a sample: ``%3d #%-9llu |`` -- the CPU and its timer IRQ
  count (older rtla: ``%-9d``, a 32-bit int) -- then cur, min, avg, max of
  the IRQ latency, ``|``, the same of the thread latency, and with user
  threads ``|`` and the return-to-user latency; a context without samples
  prints ``-`` four times;
* rtla 6.8 and later: a rule of dashes and ``ALL #%-6llu e%d |`` (the count
  over all CPUs, cut to six digits and a power of ten) with min, avg, max;
  with user threads and no user sample that line ends in ``|`` without a
  line break;
* the missed-events note and, after a -a/-T/-i stop, ``rtla timerlat hit
  stop tracing`` and the auto-analysis, as after ``hist``.

The last block is the run.  It holds no histogram, so percentiles are
unknown; and it counts each CPU's timer IRQs, not its thread's wake-ups:
"Unless trace is being lost, IRQ counter is always the max" (rtla's own
comment), the thread having seen the same or one fewer.
"""

from __future__ import annotations

import re
from typing import Any

from ..hist import Histogram
from ..model import CpuResult
from .common import MAX_DIGITS, NS, US, Parsed, Source, clean_line, snippet
from .rtla import MAX_ANALYSIS_LINES, MISSED_RE, OSNOISE, OSNOISE_RE, STOP_LINE, TOP_TITLE_RE, analysis

HEAD_RE = re.compile(r"(\d{1,6}) (\d\d):(\d\d):(\d\d)\s*\|\s*IRQ Timer Latency \((us|ns)\)\s*\|\s*Thread Timer "
                     r"Latency \((?:us|ns)\)(\s*\|\s*Ret user Timer Latency \((?:us|ns)\))?")
COLUMNS_RE = re.compile(r"CPU COUNT\s*\|(?:\s*cur\s+min\s+avg\s+max\s*\|?)+")
VALUE = rf"(?:-?[0-9]{{1,{MAX_DIGITS}}}|-)"
# four values, '%9llu ' each: a 9-digit one touches the '|' before it, never its neighbour
FOUR = rf"(\s*{VALUE}(?:\s+{VALUE}){{3}})"
CPU_RE = re.compile(rf"(\d{{1,5}}) #(-?\d{{1,{MAX_DIGITS}}})\s*\|{FOUR}\s*\|{FOUR}(?:\s*\|{FOUR})?")
RULE_RE = re.compile(r"-+(?:\|-+)+")
ALL_RE = re.compile(rf"ALL #\d{{1,{MAX_DIGITS}}}\s+e\d{{1,3}}\s*\|.*")
CMD_RE = re.compile(r"(?:\S*[#$>]\s+)?(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?((?:rtla\s+)?timerlat\s.*)")
EXPECTED_TOP = ("a line of rtla timerlat top's output (its 'Timer Latency' header, 'CPU COUNT', a line per CPU, "
                "'ALL #')")


def read_top(src: Source) -> Parsed:  # noqa: C901 -- one branch per kind of line rtla prints
    block: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    command = None
    stopped = False
    analysed: list[str] = []
    warnings: list[str] = []
    stray: tuple[int, str] | None = None
    preamble: list[tuple[int, str]] = []
    for no, raw in src.lines():
        if stopped:
            if len(analysed) < MAX_ANALYSIS_LINES:
                analysed.append(raw)
            continue
        if "\x1bc" in raw:   # a redraw: the terminal is reset, a new block starts
            raw = raw.replace("\x1bc", "")
        line = clean_line(raw)
        if not line:
            continue
        if stray is not None:
            raise _not_top(src, *stray)
        if TOP_TITLE_RE.fullmatch(line):
            block = {"line": no, "cpus": {}}
        elif OSNOISE_RE.fullmatch(line):
            raise src.error(no, OSNOISE)
        elif block is not None and (m := HEAD_RE.match(line)):
            block["duration_s"] = int(m[1]) * 86400 + int(m[2]) * 3600 + int(m[3]) * 60 + int(m[4])
            block["unit"], block["user"] = (NS if m[5] == "ns" else US), bool(m[6])
        elif block is not None and "unit" in block and COLUMNS_RE.fullmatch(line):
            continue
        elif block is not None and "unit" in block and (m := CPU_RE.fullmatch(line)):
            block["cpus"][int(m[1])] = (no, m)
            last = block
        elif RULE_RE.fullmatch(line) or ALL_RE.fullmatch(line):
            continue
        elif MISSED_RE.fullmatch(line):
            warnings.append(f"rtla said: {line}")
        elif line == STOP_LINE:
            stopped = True
        elif line.startswith("Saving trace to"):
            continue
        elif block is None and (m := CMD_RE.fullmatch(line)) and command is None:
            command = m[1][:2000]
        elif block is None and last is None and len(preamble) < 10:  # rtla's stderr (2>&1), a prompt
            preamble.append((no, line))
        else:
            stray = (no, line)
    if last is None:
        raise src.error(stray[0] if stray else 1, "found no CPU line ('  0 #1000 | ...') of rtla timerlat top; the "
                                                  "file is cut off, or not its output")
    if preamble:
        lines = ", ".join(f"{no} ({snippet(text)})" for no, text in preamble)
        warnings.insert(0, f"line{'s' if len(preamble) > 1 else ''} {lines} before rtla's output "
                           f"{'are' if len(preamble) > 1 else 'is'} not its output (its messages on standard error, "
                           "a prompt): skipped")
    if stray is not None:
        warnings.insert(0, f"line {stray[0]} ({snippet(stray[1])}) is not rtla's output and ends the file (a copy's "
                           "end, a shell prompt); everything before it was read, a whole output")
    cpus, others = _cpus(src, last)
    warnings.append("rtla timerlat top keeps no histogram (only min, average and max) and counts each CPU's timer "
                    "IRQs, not its thread's wake-ups, which may be one fewer: no percentile is known; import "
                    "`rtla timerlat hist` for the distribution")
    if stopped:
        warnings.append("rtla stopped itself at its -a/-T/-i threshold: the run covers only the time before that "
                        "wake-up; next time, leave out the threshold for a measurement of the whole duration")
    config = {"resolution_ns": last["unit"], "cpus": sorted(last["cpus"])}
    return Parsed(format="rtla-timerlat-top", cpus=cpus, config=config, warnings=warnings, command_line=command,
                  duration_s=last.get("duration_s"), source_extra={"other_latencies": others},
                  trace=analysis(analysed) if stopped else None)


def _not_top(src: Source, no: int, line: str):
    return src.error(no, f"expected {EXPECTED_TOP}, not {snippet(line)}")


def _values(src: Source, no: int, text: str | None, unit: int) -> tuple[int, ...] | None:
    """cur, min, avg, max in ns; None for a context without samples ('-')."""
    if text is None:
        return None
    parts = text.split()
    if all(p == "-" for p in parts):
        return None
    if any(p.startswith("-") for p in parts):
        raise src.error(no, f"expected four latencies or four '-', not {snippet(text.strip())}")
    return tuple(int(p) * unit for p in parts)


def _cpus(src: Source, block: dict[str, Any]) -> tuple[list[CpuResult], dict[str, list[dict[str, Any]]]]:
    unit = block["unit"]
    cpus: list[CpuResult] = []
    others: dict[str, list[dict[str, Any]]] = {}
    for cpu, (no, m) in sorted(block["cpus"].items()):
        count = int(m[2])
        if count < 0:
            raise src.error(no, f"CPU {cpu}'s count is negative ({count}): older rtla's 32-bit counter wrapped past "
                                "2^31 timer IRQs, so the count cannot be trusted")
        irq, thread, user = (_values(src, no, m[k], unit) for k in (3, 4, 5))
        n = count if thread is not None else 0
        cpus.append(CpuResult(cpu=cpu, count=n, min_ns=thread[1] if thread else None,
                              max_ns=thread[3] if thread else None, sum_ns=thread[2] * n if thread else None,
                              overruns=None, hist=Histogram.from_buckets([], overflow=n, range_max_ns=-1)))
        for name, v in (("irq", irq), ("user", user)):
            if name == "user" and not block.get("user"):
                continue
            others.setdefault(name, []).append({"cpu": cpu, "count": (count if name == "irq" else None) if v else 0,
                                                "overflow": None,
                                                "min_ns": v[1] if v else None, "avg_ns": v[2] if v else None,
                                                "max_ns": v[3] if v else None})
    return cpus, others
