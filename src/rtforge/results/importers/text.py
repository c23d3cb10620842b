"""cyclictest's text output (rt-tests 0.84 to 2.x), as printed to a terminal or file.

What a run prints, in order (each part optional except the results):

* ``# /dev/cpu_dma_latency set to 0us``
* not quiet: a redrawn block per refresh, ``policy: fifo: loadavg: ...``
  then one status line per thread, each redraw preceded by a cursor-up
  escape; with ``-q`` only the final block, without the policy line;
* ``--spike=N``: ``T: 1 Spike:     541: TS:   1638026488`` lines (thread,
  latency, CLOCK_MONOTONIC time in µs), then ``spikes = 9``;
* ``-h N`` / ``-H N``: ``# Histogram``, N rows ``bucket<space>count<tab>count``
  (``-H`` adds a column, the sum of the threads, when there are several),
  then ``# Total:`` (the histogram's sum, not the cycles), ``# Min/Avg/Max
  Latencies:``, ``# Histogram Overflows:`` (``-H`` adds the total to Total,
  Max and Overflows, not to Min and Avg), ``# Histogram Overflow at cycle
  number:`` and ``# Thread N:`` listing the first overflowing cycles plus
  ``# NNNNN others``.  rt-tests 2.x prints only the non-empty rows and no
  ``# Total:``; cyclictest 0.84's footer ends at ``# Histogram Overflows:``;
* ``-b N``: ``# Thread Ids:``, ``# Break thread: <tid>``, ``# Break value:``.

``-N`` prints every value in ns but keeps bucket k meaning "k units", so a
histogram holds only wake-ups under N ns.  The text says nothing of it; the
status lines betray it by their widths (``Act:%8ld`` instead of ``%5ld``).

A non-quiet run's last status block is printed a few ms before the threads
stop, so when a histogram is present its summary lines are the truth.
Without one, a thread's worst Max over all its status lines counts (a
thread's max never falls, so a lower later one is a redraw gone wrong).

A first line that is only a file name (``out.txt``) is what some copy tools
put before a file's content; it is skipped with a warning.  A last line that
is nothing cyclictest prints (a copy's ``-->``, a shell prompt) after a whole
output is tolerated with a warning naming it; anywhere else it is refused.

``-v`` (a line per wake-up) is read by ``verbose.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...errors import UserError
from ..hist import Histogram
from ..model import CpuResult
from ..raw.cyclictest import STATUS_RE, cpus_from_status, last_status
from .cmdline import find_in_text, histogram_size, number, parse_cmdline, thread_cpus
from .common import (
    EXPECTED,
    MAX_VALUE,
    NS,
    NUM,
    US,
    Parsed,
    Source,
    check_extremes,
    clean_line,
    column_sums,
    exact_sum,
    ints,
    no_histogram_warning,
    nsecs_warning,
    snippet,
    sparse_cpu,
)
from .rows import Rows
from .spikes import break_info, break_warning, spike_results
from .verbose import Verbose, read_verbose

FOOTER_KEYS = ("Total", "Min Latencies", "Avg Latencies", "Max Latencies", "Histogram Overflows")
REQUIRED_FOOTER = FOOTER_KEYS[1:]  # rt-tests 2.x prints no '# Total:'
WRAPPER_RE = re.compile(r"[\w.+-]{1,200}\.(?:txt|log|out|dat|hist)")
FOOTER_RE = re.compile(r"# (Total|Min Latencies|Avg Latencies|Max Latencies|Histogram Overflows):(.*)")
OUTLIERS = "# Histogram Overflow at cycle number:"
THREAD_RE = re.compile(r"# Thread ([0-9]{1,6}):(.*)")
OTHERS_RE = re.compile(rf"(.*?)#\s*({NUM}) others")
SPIKE_RE = re.compile(rf"T:\s*({NUM})\s+Spike:\s*({NUM}):\s*TS:\s*({NUM})")
SPIKES_TOTAL_RE = re.compile(rf"spikes = ({NUM})")
# "policy: fifo: loadavg: ..." or, since rt-tests 1.x, "policy: other/other: ..." (the threads' policy, then
# the main thread's) for a run without a real-time priority
POLICY_RE = re.compile(r"policy: (\w+)(?:/\w+)?:")
DMA_RE = re.compile(rf"# /dev/cpu_dma_latency set to ({NUM})us")
TIDS_RE = re.compile(r"# Thread Ids:(.*)")
BREAK_RE = re.compile(rf"# Break (thread|value): ({NUM})")
SMI_RE = re.compile(rf"SMI:\s*{NUM}")
WIDTH_RE = re.compile(r"Act:( *[0-9]+) Avg:( *[0-9]+) Max:")
STATUS_FORM = "'T: n (pid) P:.. I:.. C:.. Min:.. Act:.. Avg:.. Max:..'"


@dataclass
class Scan:
    """Everything recognised in the file, with line numbers for errors."""

    hist_line: int | None = None
    rows: Rows = field(default_factory=Rows)
    footer: dict[str, tuple[int, list[int]]] = field(default_factory=dict)
    outliers_line: int | None = None
    thread_lists: dict[int, tuple[int, int]] = field(default_factory=dict)  # thread -> (line, samples accounted)
    statuses: list[tuple[int, str]] = field(default_factory=list)
    spikes: list[tuple[int, int, int, int]] = field(default_factory=list)  # line, thread, latency, TS µs
    spikes_total: tuple[int, int] | None = None
    policy: str | None = None
    dma_us: int | None = None
    tids: list[int] = field(default_factory=list)
    breaks: dict[str, tuple[int, int]] = field(default_factory=dict)  # thread|value -> (line, number)
    cyclictest_warnings: list[str] = field(default_factory=list)
    command_line: str | None = None
    skipped: list[str] = field(default_factory=list)
    last_line: int = 0
    verbose: Verbose = field(default_factory=Verbose)          # -v: a line per wake-up
    stray: tuple[int, str, UserError] | None = None            # a last line that is not cyclictest's


def scan(src: Source) -> Scan:
    s = Scan()
    in_rows = False
    for no, raw in src.lines():
        s.last_line = no
        line = clean_line(raw)
        if not line:
            continue
        if s.stray is not None:  # the line that was not cyclictest's was not the last: the file is not one output
            raise s.stray[2]
        if in_rows:
            if s.rows.add(src, no, line):
                continue
            if not line.startswith("#"):
                raise src.error(no, f"expected a histogram row (the bucket, then one count per thread) after row "
                                    f"{s.rows.last}, not {snippet(line)}")
            in_rows = False
        if line == "# Histogram":
            if s.hist_line is not None:
                raise src.error(no, "found a second '# Histogram'; import one cyclictest output per file")
            s.hist_line, in_rows = no, True
        elif line.startswith("#"):
            _comment(src, s, no, line)
        elif no == 1 and WRAPPER_RE.fullmatch(line):
            s.skipped.append(f"line 1 ({snippet(line)}) is a file name, as copy tools write before a file's content, "
                             "not cyclictest output; it was skipped")
        else:
            try:
                scan_body(src, s, no, line)
            except NotCyclictest as e:
                s.stray = (no, line, e)   # tolerated if it is the last line and all before it is whole
    return s


def _comment(src: Source, s: Scan, no: int, line: str) -> None:
    if m := FOOTER_RE.fullmatch(line):
        _footer_line(src, s, no, m[1], m[2])
    elif line == OUTLIERS:
        s.outliers_line = no
    elif m := THREAD_RE.fullmatch(line):
        _overflowed_cycles(src, s, no, int(m[1]), m[2])
    elif m := TIDS_RE.fullmatch(line):
        s.tids = ints(src, no, m[1], "the thread ids")
    elif m := BREAK_RE.fullmatch(line):
        s.breaks[m[1]] = (no, int(m[2]))
    elif m := DMA_RE.fullmatch(line):
        s.dma_us = int(m[1])
    # Other comments (e.g. the status dump of SIGUSR1) carry no results.


def _footer_line(src: Source, s: Scan, no: int, key: str, text: str) -> None:
    """A summary line ('# Max Latencies: ...'): once, after the histogram, one value per thread at least."""
    if s.hist_line is None:
        raise src.error(no, f"found '# {key}:' without a '# Histogram' before it; expected {EXPECTED}")
    if key in s.footer:
        raise src.error(no, f"found a second '# {key}:' line; import one cyclictest output per file")
    values = ints(src, no, text, f"the '# {key}:' values")
    if not values:
        raise src.error(no, f"expected one '# {key}:' value per thread, found none")
    s.footer[key] = (no, values)


def _overflowed_cycles(src: Source, s: Scan, no: int, thread: int, rest: str) -> None:
    """'# Thread N: cycle cycle ... # NNN others': how many of the thread's samples overflowed, once per thread."""
    others = 0
    if o := OTHERS_RE.fullmatch(rest):
        rest, others = o[1], int(o[2])
    if "#" in rest and "others" not in rest:
        raise src.error(no, f"a second cyclictest output starts in the middle of this line ({snippet(rest)}): "
                            "two outputs were glued together; import one output per file")
    listed = ints(src, no, rest, "the overflowing cycle numbers")
    if thread in s.thread_lists:
        raise src.error(no, f"found a second '# Thread {thread}:' line; import one cyclictest output per file")
    s.thread_lists[thread] = (no, len(listed) + others)


def scan_body(src: Source, s: Scan, no: int, line: str) -> None:
    """A line that is not a comment or histogram row (the CSV reader shares this)."""
    if line[0].isdigit() and s.verbose.take(src, no, line):  # first: -v prints millions of these
        return
    if m := SPIKE_RE.fullmatch(line):
        s.spikes.append((no, int(m[1]), int(m[2]), int(m[3])))
    elif m := SPIKES_TOTAL_RE.fullmatch(line):
        s.spikes_total = (no, int(m[1]))
    elif line.startswith("T:"):
        m = STATUS_RE.match(line)
        rest = line[m.end():].strip() if m else ""
        if not m or (rest and not SMI_RE.fullmatch(rest)):
            raise src.error(no, f"expected a whole status line {STATUS_FORM}, not {snippet(line)}")
        if not all(re.fullmatch(NUM, v) for v in m.groupdict().values()):
            raise src.error(no, f"expected whole numbers of at most 15 digits in the status line, not {snippet(line)}")
        s.statuses.append((no, line))
    elif m := POLICY_RE.match(line):
        s.policy = m[1]
    elif line.startswith("WARN:"):
        s.cyclictest_warnings.append(line[5:].strip())
    elif (cmd := find_in_text(line)) is not None:
        if s.command_line is None:
            s.command_line = cmd[:2000]
    elif not s.verbose.take(src, no, line):
        raise NotCyclictest(f"{src.name}:{no}: expected a line of cyclictest output (a status line {STATUS_FORM}, a "
                            f"histogram or '#' summary line, or a spike line), not {snippet(line)}")


def value_unit(s: Scan, mins: list[int]) -> tuple[int, str | None]:
    """(ns per unit, how -N was recognised) from the status lines' widths,
    else from a minimum latency no µs run has (1 ms)."""
    for _, line in s.statuses:
        if m := WIDTH_RE.search(line):
            widths = {len(m[1]), len(m[2])}
            if widths == {8}:
                return NS, "the 8-character Act/Avg columns of its status lines"
            if widths == {5}:
                return US, None
    if mins and min(mins) >= 1000:
        return NS, f"a minimum latency of {min(mins):,}, which would be over 1 ms in µs"
    return US, None


def status_config(s: Scan) -> dict:
    """Interval, priority and policy: only the status lines and the policy line say them."""
    cfg: dict = {}
    latest = last_status("\n".join(line for _, line in s.statuses))
    if latest:
        first = latest[min(latest)]
        cfg["interval_us"], cfg["priority"] = first["interval"], first["prio"]
        intervals = [latest[t]["interval"] for t in sorted(latest)]
        if len(set(intervals)) > 1:
            cfg["thread_intervals_us"] = intervals  # cyclictest's -d distance between threads
    if s.policy:
        cfg["policy"] = s.policy
    return cfg


class NotCyclictest(UserError):
    """A line that is nothing cyclictest prints."""


def read_text(src: Source) -> Parsed:
    s = scan(src)
    try:
        parsed = _read(src, s)
    except UserError:
        if s.stray is not None:  # what came before the odd last line is not whole either: that line is the news
            raise s.stray[2] from None
        raise
    if s.stray is not None:
        parsed.warnings.insert(0, f"line {s.stray[0]} ({snippet(s.stray[1])}) is not cyclictest's output and ends "
                                  "the file (a copy's end, a shell prompt); everything before it was read, a whole "
                                  "output")
    return parsed


def _read(src: Source, s: Scan) -> Parsed:
    if s.hist_line is None and not s.statuses and not s.verbose.threads:
        raise src.error(1, f"found no cyclictest results (no '# Histogram', no status line {STATUS_FORM}); "
                           f"expected {EXPECTED}")
    opts = parse_cmdline(s.command_line) if s.command_line else {}
    if s.hist_line is None and s.verbose.threads:
        parsed = read_verbose(src, s.verbose, s.statuses, status_config(s), lambda mins: value_unit(s, mins))
    elif s.hist_line is None:
        parsed = _from_status(src, s)
    elif not s.rows.read and "Max Latencies" in s.footer:
        parsed = _from_summary_lines(src, s)
    else:
        parsed = _from_histogram(src, s, histogram_size(opts))
    _command_line(parsed, s.command_line, opts)
    if s.dma_us is not None:
        parsed.system["cpu_dma_latency_us"] = s.dma_us
    parsed.warnings += [f"cyclictest warned: {w}" for w in s.cyclictest_warnings]
    return parsed


def _footer(src: Source, s: Scan) -> dict[str, tuple[int, list[int]]]:
    rows = s.rows
    if not rows.read or s.hist_line is None or rows.last_line is None:
        raise src.error(s.hist_line or 1, "'# Histogram' is followed by no histogram rows; the file is cut off or "
                                          "damaged")
    prev = s.footer["Total"][0] if "Total" in s.footer else rows.last_line
    for key in REQUIRED_FOOTER:
        if key not in s.footer:
            raise src.error(prev + 1, f"expected the '# {key}:' line after the histogram; "
                                      "the file is cut off or damaged")
        prev = s.footer[key][0]
    return s.footer


def _check_overflow_lists(src: Source, s: Scan, n: int, overflow: list[int]) -> None:
    """cyclictest 1.x and 2.x list the overflowing cycles per thread; 0.84 ends before that list."""
    if s.outliers_line is None:
        if s.thread_lists:
            line = min(ln for ln, _ in s.thread_lists.values())
            raise src.error(line, f"expected the '{OUTLIERS}' line before '# Thread N:' lines; the file is damaged")
        return
    for j in range(n):
        if j not in s.thread_lists:
            raise src.error(max([s.outliers_line, *(ln for ln, _ in s.thread_lists.values())]) + 1,
                            f"expected the '# Thread {j}:' line of overflowing cycles; the file is cut off or damaged")
        line, accounted = s.thread_lists[j]
        if accounted != overflow[j]:
            raise src.error(line, f"'# Thread {j}:' accounts for {accounted} overflowed samples but "
                                  f"'# Histogram Overflows' gives {overflow[j]}; the file is damaged")


def _command_line(parsed: Parsed, command: str | None, opts: dict) -> None:
    """What a recorded command line adds: where threads ran (-a, -S) and the
    settings the output does not print (the status lines win where they do)."""
    parsed.command_line = command
    pinned = thread_cpus(opts, len(parsed.cpus))
    if pinned is None:
        parsed.config["cpu_is_thread"] = True    # T: n is a thread, which ran wherever the scheduler put it
    else:
        for c in parsed.cpus:
            c.cpu = pinned[c.cpu] if c.cpu < len(pinned) else c.cpu
        parsed.config["cpus"] = sorted({c.cpu for c in parsed.cpus})
    if (prio := number(opts.get("priority"))) is not None:
        parsed.config.setdefault("priority", prio)
        parsed.config.setdefault("policy", opts.get("policy") or ("fifo" if prio else "other"))
    if (interval := number(opts.get("interval"))) is not None:
        parsed.config.setdefault("interval_us", interval)


def _from_summary_lines(src: Source, s: Scan) -> Parsed:
    """'# Histogram' followed directly by its '#' summary lines: the rows were
    filtered out (grep '^#', as several Pi scripts save it), every figure
    the summary states is kept, and no percentile is known."""
    f = s.footer
    for key in REQUIRED_FOOTER:
        if key not in f:
            raise src.error(s.last_line + 1, f"expected the '# {key}:' line of cyclictest's summary; the file is "
                                             "cut off or damaged")
    n = len(f["Min Latencies"][1])
    for key, (line, v) in f.items():
        if len(v) < n:
            raise src.error(line, f"'# {key}:' gives {len(v)} values but '# Min Latencies:' gives {n}; "
                                  "the file is damaged")
    values = {k: v[:n] for k, (_, v) in f.items()}  # -H appends a total to Total, Max and Overflows
    latest = last_status("\n".join(line for _, line in s.statuses))
    if "Total" in values:
        counts = [values["Total"][j] + values["Histogram Overflows"][j] for j in range(n)]
    elif len(latest) == n:
        counts = [latest[t]["cycles"] for t in sorted(latest)]
    else:
        raise src.error(f["Min Latencies"][0], "this summary has no '# Total:' line (rt-tests 2.x) and no status "
                                               "lines, so the number of wake-ups is unknown; import the whole "
                                               "output, histogram rows included")
    unit, how = value_unit(s, [values["Min Latencies"][j] for j in range(n) if counts[j]])
    cpus = [CpuResult(cpu=j, count=counts[j], min_ns=values["Min Latencies"][j] * unit if counts[j] else None,
                      max_ns=values["Max Latencies"][j] * unit if counts[j] else None,
                      sum_ns=round(values["Avg Latencies"][j] * unit * counts[j]) if counts[j] else None,
                      overruns=None, hist=Histogram.from_buckets([], overflow=counts[j], range_max_ns=-1))
            for j in range(n)]
    warnings = [*s.skipped, "the histogram's rows are not in this file (only cyclictest's '#' summary lines are), "
                "so only the count, min, average and max are known: no percentile, and the averages are "
                "cyclictest's whole-µs ones; import the whole output for the distribution"]
    if how:
        warnings.insert(1, nsecs_warning(how))
    config = {"threads": n, "resolution_ns": unit, **status_config(s)}
    return Parsed(format="cyclictest-summary-lines", cpus=cpus, config=config, warnings=warnings)


def _histofall(src: Source, s: Scan, f: dict[str, tuple[int, list[int]]], n: int) -> bool:
    """Whether the rows and summary lines carry -H's total column beside the n threads'
    (and they agree on how many columns they have)."""
    cols = s.rows.width
    histofall = n > 1 and cols == n + 1
    if cols != n and not histofall:
        raise src.error(s.rows.first_line or 1, f"histogram rows have {cols} counts per bucket but the summary lines "
                                           f"list {n} threads; the file is damaged")
    for key in FOOTER_KEYS:
        if key not in f:
            continue
        line, values = f[key]
        want = n if key in ("Min Latencies", "Avg Latencies") else n + histofall
        if len(values) != want:
            extra = " plus the -H total" if want > n else ""
            raise src.error(line, f"expected {want} '# {key}:' values (one per thread{extra}), found {len(values)}")
    return histofall


def _check_histofall_total(src: Source, f: dict[str, tuple[int, list[int]]], counts: np.ndarray, row_lines: np.ndarray,
                           n: int) -> None:
    """-H's total column and summary values are the threads' sums (and maximum): else the file is damaged."""
    maxes, overflow = f["Max Latencies"][1], f["Histogram Overflows"][1]
    bad = np.nonzero(counts[:, n] != counts[:, :n].sum(axis=1))[0]
    if bad.size:
        i = int(bad[0])
        raise src.error(int(row_lines[i]), f"the -H total column ({int(counts[i, n])}) is not the sum of the "
                                           f"thread columns ({int(counts[i, :n].sum())}); the file is damaged")
    if maxes[n] != max(maxes[:n]) or overflow[n] != sum(overflow[:n]):
        raise src.error(f["Max Latencies"][0], "the -H total of '# Max Latencies' or '# Histogram Overflows' "
                                               "disagrees with the threads' values; the file is damaged")


def _check_total_line(src: Source, f: dict[str, tuple[int, list[int]]], sums: list[int], n: int, width: int) -> None:
    """'# Total:' (cyclictest before 2.x) gives each column's histogram sum: it must be the rows' sum."""
    total = f["Total"][1]
    for j in range(width):
        if total[j] != sums[j]:
            who = f"thread {j}" if j < n else "the -H total"
            raise src.error(f["Total"][0], f"'# Total' gives {total[j]} samples for {who} but its histogram "
                                           f"column sums to {sums[j]}; the file is damaged or was edited")


def _from_histogram(src: Source, s: Scan, asked: int | None = None) -> Parsed:
    """asked: the -h size from a recorded command line, the truth where the
    rows do not tell it (rt-tests 2.x prints only the non-empty ones)."""
    f = _footer(src, s)
    n = len(f["Min Latencies"][1])
    histofall = _histofall(src, s, f, n)
    mins, avgs, maxes, overflow = (f[k][1] for k in REQUIRED_FOOTER)
    buckets, row_lines, counts = s.rows.matrix()
    sums = column_sums(counts)
    if histofall:
        _check_histofall_total(src, f, counts, row_lines, n)
    if "Total" in f:
        _check_total_line(src, f, sums, n, n + histofall)
    _check_overflow_lists(src, s, n, overflow)
    totals = [sums[j] + overflow[j] for j in range(n)]
    if any(t > MAX_VALUE for t in totals):
        raise src.error(f["Histogram Overflows"][0], f"a thread has more than {MAX_VALUE:,} samples, more than any "
                                                      "run can have; the file is damaged")
    unit, how = value_unit(s, [mins[j] for j in range(n) if totals[j]])
    unit_name = "ns" if unit == NS else "µs"
    size = None if s.rows.sparse else s.rows.size
    last = s.rows.last
    if asked is not None and asked > s.rows.last and (size is None or size == asked):
        size, last = asked, asked - 1   # the command line's -h: the range, wherever the last row printed ends
    for j in range(n):
        if totals[j]:
            used = counts[:, j] > 0
            check_extremes(src, f["Min Latencies"][0], f["Max Latencies"][0], j,
                           dict(zip(buckets[used].tolist(), counts[used, j].tolist())), overflow[j],
                           mins[j], maxes[j], size, unit_name)
    spikes, top, warnings = spike_results(src, s, list(range(n)), unit)
    cpus = []
    for j in range(n):
        sum_units = exact_sum(buckets, counts[:, j]) if not overflow[j] else avgs[j] * totals[j]
        cpus.append(sparse_cpu(j, buckets, counts[:, j], overflow[j], unit, last, mins[j] * unit,
                               maxes[j] * unit, sum_units * unit, spikes[j]))
    if size is None and any(overflow[:n]):
        warnings.append(f"this output prints only the non-empty histogram rows (rt-tests 2.x), so the histogram's "
                        f"size is unknown: the overflowed samples lie somewhere above {s.rows.last} {unit_name}")
    if how:
        warnings.insert(0, nsecs_warning(how, size or s.rows.size, sum(overflow[:n]), sum(totals)))
    if brk := break_info(s):
        warnings.append(break_warning(*brk, unit))
    config = {"threads": n, "resolution_ns": unit, **status_config(s)}
    if size is not None:
        config["histogram_us" if unit == US else "histogram_ns"] = size
    fmt = "cyclictest-histofall" if histofall else "cyclictest-histogram"
    return Parsed(format=fmt, cpus=cpus, config=config, warnings=s.skipped + warnings, top_spikes=top)


def _from_status(src: Source, s: Scan) -> Parsed:
    text = "\n".join(line for _, line in s.statuses)
    latest = last_status(text)
    mins = [st["min"] for st in latest.values() if st["cycles"]]
    unit, how = value_unit(s, mins)
    threads = sorted(latest)
    spikes, top, warnings = spike_results(src, s, threads, unit)
    cpus = cpus_from_status(text, [], unit_ns=unit)
    for c in cpus:
        c.spikes = spikes[c.cpu]
    warnings.insert(0, no_histogram_warning())
    warnings[:0] = s.skipped
    if how:
        warnings.insert(1, nsecs_warning(how))
    if brk := break_info(s):
        thread, value = brk
        note = ""
        cpu = next((c for c in cpus if c.cpu == thread), None)
        if cpu is not None and cpu.count and value * unit > (cpu.max_ns or 0):
            # The last status block is drawn before the breaking wake-up is
            # counted; that wake-up is still one cyclictest measured.
            cpu.max_ns = value * unit
            note = " (more than its last status line shows, so that is its max)"
        warnings.append(break_warning(thread, value, unit, note))
    config = {"threads": len(threads), "resolution_ns": unit, **status_config(s)}
    return Parsed(format="cyclictest-summary", cpus=cpus, config=config, warnings=warnings, top_spikes=top)
