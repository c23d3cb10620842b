"""rtla timerlat's output: ``rtla timerlat hist`` here, ``top`` in rtlatop.py.

What ``rtla timerlat hist`` prints (tools/tracing/rtla/src/timerlat_hist.c,
rtla 5.17 to 7.x):

* a header unless --no-header: ``# RTLA timerlat histogram``, ``# Time unit
  is microseconds (us)`` (``nanoseconds (ns)`` with -n), ``# Duration:
  %3d %02d:%02d:%02d`` (days, then h:m:s), then ``Index`` and per CPU that
  saw any sample ``   IRQ-%03d`` (not with --no-irq), ``   Thr-%03d`` (not
  with --no-thread) and ``   Usr-%03d`` (user-space threads, -u/-U, rtla
  6.7 and later);
* a row per bucket that holds a sample (every bucket with --with-zeros):
  ``%-6d`` the bucket's first value (bucket number x -b, the bucket size),
  then ``%9d `` per column.  The histogram has -E entries (256 by default):
  a sample of entries x size or more is counted in ``over:`` only;
* ``over:``, then unless --no-summary ``count:``, ``min:``, ``avg:``,
  ``max:`` per column -- count, min and max cover every sample, those over
  the table too; avg is the truncated mean.  A column without samples
  prints ``-`` (rtla 6.8 and later; before, min printed ~0 as
  18446744073709551615, avg ``-`` and max 0);
* rtla 6.8 and later: ``ALL:`` with the contexts' names, then the same four
  lines over all CPUs;
* ``N (P%) events missed, results might not be accurate`` when the trace
  buffer lost events; ``rtla timerlat hit stop tracing`` and the
  auto-analysis when a -a/-T/-i threshold stopped the run.

Each sample is truncated to the unit (a printed 371 means [371, 372) µs),
as cyclictest's are.  The thread latency (Thr) is what cyclictest measures
-- a thread woken by a timer -- so it is the run's latency; the IRQ and
return-to-user (Usr) latencies are kept beside it (``source
["other_latencies"]``).  osnoise's output measures something else and is
refused in one sentence.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..hist import Histogram
from ..model import CpuResult
from ..raw.rtla_analysis import culprit, idle_exit, parse
from .common import MAX_DIGITS, MAX_VALUE, NS, US, Parsed, Source, clean_line, snippet

HIST_TITLE = "# RTLA timerlat histogram"
TOP_TITLE_RE = re.compile(r"\s*Timer Latency\s*")
OSNOISE_RE = re.compile(r"# RTLA (?:osnoise|hwnoise) histogram|\s*(?:Operating System|Hardware-related) Noise\s*")
INDEX_RE = re.compile(r"Index((?:\s+(?:IRQ|Thr|Usr)-\d{1,5})+)")
NO_INDEX_RE = re.compile(r"(?:\s*(?:IRQ|Thr|Usr)-\d{1,5})+")
COLUMN_RE = re.compile(r"(IRQ|Thr|Usr)-(\d{1,5})")
SUMMARY_RE = re.compile(r"(over|count|min|avg|max):(.*)")
ALL_RE = re.compile(r"ALL:((?:\s+(?:IRQ|Thr|Usr))+)")
UNIT_RE = re.compile(r"# Time unit is (?:microseconds \(us\)|(nanoseconds) \(ns\))")
DURATION_RE = re.compile(r"# Duration:\s*(\d{1,6}) (\d\d):(\d\d):(\d\d)")
MISSED_RE = re.compile(r"(?:\d{1,20} \([0-9.]{1,12}%\)|unknown number of) events missed, results might not be accurate")
STOP_LINE = "rtla timerlat hit stop tracing"
CMD_RE = re.compile(r"(?:\S*[#$>]\s+)?(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?((?:rtla\s+)?timerlat\s.*)")
ROW_RE = re.compile(r"(0|[1-9][0-9]*)\s")
EMPTY_MIN = str(2**64 - 1)     # older rtla's min of a column without samples (~0ULL)
CONTEXTS = {"IRQ": "irq", "Thr": "thread", "Usr": "user"}
OSNOISE = ("this is rtla osnoise (or hwnoise) output, which measures how much the system takes from a busy "
           "thread, not how late a timer wakes one; import the output of `rtla timerlat hist` or `rtla timerlat top`")
EXPECTED_HIST = "rtla timerlat hist's output"


# a histogram row as rtla prints it ('%-6d', then '%9d ' per column: the line ends in a space); cyclictest's
# rows are zero-padded ('000029') and tab-separated
RTLA_ROW_RE = re.compile(r"(?:0|[1-9][0-9]{0,14})(?: +[0-9]{1,15})+ ")


def looks_like_rtla(prefix: str) -> bool:
    """rtla's timerlat or osnoise output, by its first lines (one printed with
    --no-header starts with its rows)."""
    lines = prefix.splitlines()
    if lines and RTLA_ROW_RE.fullmatch(lines[0].lstrip("\ufeff").rstrip("\r")):
        return True
    for line in lines[:40]:
        line = clean_line(line)
        if (line.startswith((HIST_TITLE, "# RTLA osnoise", "# RTLA hwnoise")) or INDEX_RE.fullmatch(line)
                or TOP_TITLE_RE.fullmatch(line) or OSNOISE_RE.fullmatch(line) or line.startswith("CPU COUNT")):
            return True
    return False


def is_top(prefix: str) -> bool:
    return any(TOP_TITLE_RE.fullmatch(clean_line(line.replace("\x1bc", ""))) or line.startswith("CPU COUNT")
               for line in prefix.splitlines()[:40])


@dataclass
class Column:
    context: str                # irq | thread | user
    cpu: int
    rows: dict[int, int] = field(default_factory=dict)   # bucket's first value -> samples
    summary: dict[str, str] = field(default_factory=dict)  # over, count, min, avg, max as printed


@dataclass
class HistScan:
    columns: list[Column] = field(default_factory=list)
    unit: int = US
    duration_s: float | None = None
    lines: dict[str, int] = field(default_factory=dict)    # where each part was read
    all_section: dict[str, list[str]] = field(default_factory=dict)
    all_contexts: list[str] = field(default_factory=list)
    any_zero_row: bool = False
    warnings: list[str] = field(default_factory=list)
    command_line: str | None = None
    analysis: list[str] = field(default_factory=list)
    stopped: bool = False
    stray: tuple[int, str] | None = None
    preamble: list[tuple[int, str]] = field(default_factory=list)  # lines before rtla's header


def _number(src: Source, no: int, text: str, what: str, dash: bool = False) -> str:
    """A count or latency as printed: digits (bounded), or where a latency may
    be missing '-' or older rtla's min of an empty column."""
    if dash and text in ("-", EMPTY_MIN):
        return text
    if text.startswith("-") and text[1:].isdigit():
        raise src.error(no, f"{what} is negative ({text}): rtla's 32-bit counter wrapped past 2^31 samples, so "
                            "the histogram cannot be trusted")
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_DIGITS:
        raise src.error(no, f"expected {what} as a whole number of at most {MAX_DIGITS} digits, not {snippet(text)}")
    return text


def scan_hist(src: Source) -> HistScan:  # noqa: C901 -- one branch per kind of line rtla prints
    s = HistScan()
    phase = "head"
    for no, raw in src.lines():
        line = raw.rstrip()
        if s.stopped:  # the auto-analysis after a stop: rtla's own report, kept as text (bounded)
            if len(s.analysis) < MAX_ANALYSIS_LINES:
                s.analysis.append(line)
            continue
        text = line.strip()
        if not text:
            continue
        if s.stray is not None:
            raise _not_rtla(src, *s.stray)
        if phase == "head":
            if text == HIST_TITLE:
                s.lines["title"] = no
                _preamble(s)
            elif m := UNIT_RE.fullmatch(text):
                s.unit = NS if m[1] else US
            elif m := DURATION_RE.fullmatch(text):
                s.duration_s = int(m[1]) * 86400 + int(m[2]) * 3600 + int(m[3]) * 60 + int(m[4])
            elif m := INDEX_RE.fullmatch(text):
                s.columns = [Column(CONTEXTS[c], int(n)) for c, n in COLUMN_RE.findall(m[1])]
                s.lines["index"] = no
                _preamble(s)
                phase = "rows"
            elif NO_INDEX_RE.fullmatch(text):
                raise src.error(no, "this rtla output was printed with --no-index: its rows do not say which "
                                    "latency each holds (nor does anything say the bucket size); import an output "
                                    "printed without --no-index")
            elif OSNOISE_RE.fullmatch(text) or text.startswith(("# RTLA osnoise", "# RTLA hwnoise")):
                raise src.error(no, OSNOISE)
            elif (m := CMD_RE.fullmatch(text)) and s.command_line is None:
                s.command_line = m[1][:2000]
            elif ROW_RE.match(text + " ") or text.startswith("over:"):
                raise src.error(no, "this rtla output was printed with --no-header: its columns do not say which "
                                    "CPU and which latency (IRQ, thread, user) each one is; import an output "
                                    "printed without --no-header")
            elif len(s.preamble) < MAX_PREAMBLE:  # rtla's messages on stderr (2>&1), a prompt: named, skipped
                s.preamble.append((no, text))
            else:
                raise _not_rtla(src, *s.preamble[0])
        elif phase == "rows" and ROW_RE.match(text + " "):
            _row(src, s, no, text)
        elif m := SUMMARY_RE.fullmatch(text):
            phase = _summary(src, s, no, phase, m[1], m[2].split())
        elif phase in ("summary", "all") and (m := ALL_RE.fullmatch(text)):
            s.all_contexts = [CONTEXTS[c] for c in m[1].split()]
            s.lines["all"] = no
            phase = "all"
        elif phase in ("summary", "all", "end") and MISSED_RE.fullmatch(text):
            s.warnings.append(f"rtla said: {text}")
        elif phase in ("summary", "all", "end") and text == STOP_LINE:
            s.stopped = True
        elif phase in ("summary", "all", "end") and text.startswith("Saving trace to"):
            continue
        elif phase == "rows":
            raise src.error(no, f"expected a histogram row (the bucket, then {len(s.columns)} counts) or 'over:', "
                                f"not {snippet(text)}")
        else:
            s.stray = (no, text)
    if s.preamble:  # nothing of rtla's came after them
        raise _not_rtla(src, *s.preamble[0])
    if s.stray is not None and "count" not in s.lines and "over" not in s.lines:
        raise _not_rtla(src, *s.stray)
    if s.stray is not None:
        s.warnings.insert(0, f"line {s.stray[0]} ({snippet(s.stray[1])}) is not rtla's output and ends the file (a "
                             "copy's end, a shell prompt); everything before it was read, a whole output")
    return s


MAX_PREAMBLE = 10
MAX_ANALYSIS_LINES = 200_000   # rtla's analysis of a stop: some 30 lines per CPU, for thousands of CPUs


def _preamble(s: HistScan) -> None:
    """Lines before rtla's header, once the header shows the file is rtla's."""
    if s.preamble:
        lines = ", ".join(f"{no} ({snippet(text)})" for no, text in s.preamble)
        s.warnings.append(f"line{'s' if len(s.preamble) > 1 else ''} {lines} before rtla's header "
                          f"{'are' if len(s.preamble) > 1 else 'is'} not its output (its messages on standard "
                          "error, a prompt): skipped")
        s.preamble.clear()


def _not_rtla(src: Source, no: int, text: str):
    return src.error(no, f"expected a line of {EXPECTED_HIST} (its '#' header, 'Index' and the column names, the "
                         f"histogram rows, then 'over:', 'count:', 'min:', 'avg:', 'max:'), not {snippet(text)}")


def _row(src: Source, s: HistScan, no: int, text: str) -> None:
    parts = text.split()
    n = len(s.columns)
    if len(parts) == n and len(parts[0]) > 9:
        # '%-6d' then '%9d ': an index of 6 digits or more runs into a 9-digit first count
        parts = [parts[0][:-9], parts[0][-9:], *parts[1:]]
    if len(parts) != n + 1:
        raise src.error(no, f"expected a histogram row of the bucket and {n} counts (one per column of the 'Index' "
                            f"line), found {len(parts) - 1} counts")
    bucket = int(_number(src, no, parts[0], "the bucket"))
    if bucket <= s.lines.get("last_bucket", -1):
        raise src.error(no, f"expected a bucket above {s.lines['last_bucket']} (the rows count up), found {bucket}; "
                            "the file is damaged or holds two outputs")
    counts = [int(_number(src, no, p, "a count")) for p in parts[1:]]
    if not any(counts):
        s.any_zero_row = True
    for c, k in zip(s.columns, counts):
        if k:
            c.rows[bucket] = k
    s.lines["last_row"] = no
    s.lines["last_bucket"] = bucket


def _summary(src: Source, s: HistScan, no: int, phase: str, key: str, values: list[str]) -> str:
    if phase == "all":
        want = len(s.all_contexts)
        if key in s.all_section or len(values) != want:
            raise src.error(no, f"expected one '{key}:' value per context of the 'ALL:' line ({want}), found "
                                f"{len(values)}")
        s.all_section[key] = [_number(src, no, v, f"the ALL '{key}:' value", dash=key != "count") for v in values]
        return "all"
    if phase == "head":
        raise src.error(no, f"found '{key}:' before the 'Index' line that names the columns; the file is cut or "
                            "damaged")
    if key in s.lines:
        raise src.error(no, f"found a second '{key}:' line: import one rtla output per file")
    if len(values) != len(s.columns):
        raise src.error(no, f"expected one '{key}:' value per column of the 'Index' line ({len(s.columns)}), found "
                            f"{len(values)}")
    for c, v in zip(s.columns, values):
        c.summary[key] = _number(src, no, v, f"the '{key}:' value", dash=key in ("min", "avg", "max"))
    s.lines[key] = no
    return "summary"


def bucket_size(src: Source, s: HistScan) -> int:
    """-b, which the output never prints: every row's first value is a multiple
    of it, so it divides their greatest common divisor, and each column's min
    and max must lie in their rows.  With two rows or more past 0 the
    divisor itself is taken (a wider bucket only makes a percentile's bound
    looser, never wrong); one row says too little ('127' alone would make
    127 µs buckets), so the narrowest size the min and max allow is."""
    firsts = sorted({b for c in s.columns for b in c.rows if b})
    size = 0
    for b in firsts if len(firsts) > 1 else []:
        size = math.gcd(size, b)
    need = 1
    for c in s.columns:
        if not c.rows:
            continue
        lo, hi = min(c.rows), max(c.rows)
        if c.summary.get("min", "-") not in ("-", EMPTY_MIN):
            need = max(need, int(c.summary["min"]) - lo + 1)
        if c.summary.get("over") == "0" and c.summary.get("max", "-") != "-":
            need = max(need, int(c.summary["max"]) - hi + 1)
    if size == 0:       # a row or two: the size is at least what its samples span
        return need
    if need > size:
        raise src.error(s.lines.get("min", s.lines["index"]),
                        f"a column's min or max lies outside its histogram's rows (buckets {size} apart); the file "
                        "is damaged")
    return size


def read_hist(src: Source) -> Parsed:
    s = scan_hist(src)
    if "index" not in s.lines:
        raise src.error(s.lines.get("title", 1), f"found no 'Index' line naming the columns; expected {EXPECTED_HIST}")
    if "over" not in s.lines:
        raise src.error((s.lines.get("last_row") or s.lines["index"]) + 1,
                        "expected the 'over:' line after the histogram rows; the file is cut off or damaged")
    threads = [c for c in s.columns if c.context == "thread"]
    if not threads:
        raise src.error(s.lines["index"], "this rtla output has no thread latency (Thr-) column, printed with "
                                          "--no-thread: the thread latency is the one a task waits for; import an "
                                          "output printed without --no-thread")
    size = bucket_size(src, s)
    summary = "count" in s.lines
    warnings = list(s.warnings)
    for c in s.columns:
        _check_column(src, s, c)
    _check_all(src, s)
    cpus = [_cpu(c, size, s, summary) for c in threads]
    config: dict[str, Any] = {"resolution_ns": s.unit, "cpus": [c.cpu for c in threads],
                              "rtla_bucket_ns": size * s.unit}
    top = s.lines.get("last_bucket", 0) + size - 1
    if s.any_zero_row:  # --with-zeros: every bucket printed, so the table's size is known
        config["histogram_us" if s.unit == US else "histogram_ns"] = top + 1
    over = sum(int(c.summary["over"]) for c in threads)
    if over and s.unit == US:
        where = (f"rtla's {top + 1:,} µs histogram ('over:')" if s.any_zero_row else
                 f"rtla's histogram ('over:'; it prints only the rows holding samples, so its size is unknown, "
                 f"at least {top + 1:,} µs)")
        warnings.append(f"{over:,} thread wake-ups fell beyond {where}, so their values are lost and the "
                        "percentiles among them are unknown: next time, give rtla timerlat hist more entries (-E) "
                        "or wider buckets (-b)")
    if not summary:
        warnings.append("this rtla output was printed with --no-summary: without its count, min and max lines the "
                        "worst latency of a CPU with samples in 'over:' is unknown, as are its percentiles above the "
                        "table")
    if s.unit == NS:
        total = sum(c.count for c in cpus)
        warnings.insert(0, "the values are nanoseconds (rtla -n), and the histogram's buckets are -b ns wide"
                           + (f", so {over:,} of {total:,} samples fell beyond it and the percentiles among them are "
                              "unknown" if over else "") + ": next time, leave out -n for a histogram in µs")
    if s.stopped:
        warnings.append("rtla stopped itself at its -a/-T/-i threshold: the run covers only the time before that "
                        "wake-up; next time, leave out the threshold for a measurement of the whole duration")
    extra = {"other_latencies": _others(s)}
    trace = analysis(s.analysis) if s.stopped else None
    return Parsed(format="rtla-timerlat-hist", cpus=cpus, config=config, warnings=warnings,
                  command_line=s.command_line, duration_s=s.duration_s, source_extra=extra, trace=trace)


def _value(c: Column, key: str, unit: int) -> int | None:
    v = c.summary.get(key, "-")
    return None if v in ("-", EMPTY_MIN) else int(v) * unit


def _check_column(src: Source, s: HistScan, c: Column) -> None:
    """count = the rows' samples + over, as rtla counts them (one update per sample)."""
    name = f"{'IRQ' if c.context == 'irq' else 'Thr' if c.context == 'thread' else 'Usr'}-{c.cpu:03d}"
    in_rows = sum(c.rows.values())
    over = int(c.summary["over"])
    if "count" in c.summary and in_rows + over != int(c.summary["count"]):
        raise src.error(s.lines["count"], f"{name}'s count is {int(c.summary['count']):,} but its rows and 'over:' "
                                          f"hold {in_rows + over:,}; the file is damaged or was edited")
    if in_rows + over > MAX_VALUE:
        raise src.error(s.lines["over"], f"{name} has more samples than any run can have; the file is damaged")


def _check_all(src: Source, s: HistScan) -> None:
    """The ALL section (rtla 6.8 and later) sums the CPUs: it must agree with them."""
    if not s.all_section:
        return
    for i, ctx in enumerate(s.all_contexts):
        cols = [c for c in s.columns if c.context == ctx]
        counts = s.all_section.get("count")
        if counts is not None and int(counts[i]) != sum(int(c.summary.get("count", 0)) for c in cols):
            raise src.error(s.lines["all"], f"the ALL section's {ctx} count disagrees with the CPUs' counts; the "
                                            "file is damaged")
        maxes = [int(c.summary["max"]) for c in cols if c.summary.get("max", "-") != "-"]
        top = (s.all_section.get("max") or ["-"] * len(s.all_contexts))[i]
        if maxes and top != "-" and int(top) != max(maxes):
            raise src.error(s.lines["all"], f"the ALL section's {ctx} max disagrees with the CPUs' maxima; the file "
                                            "is damaged")


def _cpu(c: Column, size: int, s: HistScan, summary: bool) -> CpuResult:
    unit = s.unit
    over = int(c.summary["over"])
    firsts = sorted(c.rows)
    lo = [b * unit for b in firsts]
    hi = [(b + size - 1) * unit for b in firsts]
    count = sum(c.rows.values()) + over
    last = s.lines.get("last_bucket", 0) + size - 1
    import numpy as np
    hist = Histogram(np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64),
                     np.asarray([c.rows[b] for b in firsts], dtype=np.int64), over, last * unit)
    if summary:
        min_ns, max_ns, avg = _value(c, "min", unit), _value(c, "max", unit), _value(c, "avg", unit)
    else:  # only the rows: their bounds, the max only when nothing fell beyond them
        min_ns = lo[0] if lo else None
        max_ns = hi[-1] if hi and not over and size == 1 else None
        avg = None
    sum_ns = avg * count if avg is not None and count else None
    if count and over == 0 and size == 1 and summary:
        sum_ns = sum(b * unit * k for b, k in c.rows.items())   # every sample's value is in the rows
    return CpuResult(cpu=c.cpu, count=count, min_ns=min_ns if count else None, max_ns=max_ns if count else None,
                     sum_ns=sum_ns, overruns=None, hist=hist)


def _others(s: HistScan) -> dict[str, list[dict[str, Any]]]:
    """The IRQ and return-to-user latencies, per CPU, as rtla summed them."""
    out: dict[str, list[dict[str, Any]]] = {}
    for c in s.columns:
        if c.context == "thread":
            continue
        count = int(c.summary["count"]) if "count" in c.summary else sum(c.rows.values()) + int(c.summary["over"])
        out.setdefault(c.context, []).append({
            "cpu": c.cpu, "count": count, "overflow": int(c.summary["over"]),
            **{f"{k}_ns": _value(c, k, s.unit) if count else None for k in ("min", "avg", "max")}})
    return out


def analysis(lines: list[str]) -> dict[str, Any]:
    """rtla's auto-analysis after a stop, as `latency --trace` keeps it."""
    text = "\n".join(lines)
    spikes = parse(text)
    for sp in spikes:
        sp["t_s"], sp["culprit"] = None, culprit(sp)
    return {"rtla_runs": 1, "spikes": spikes, "max_idle_exit": idle_exit(text), "limit_reached": False,
            "failed": None}
