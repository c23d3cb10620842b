"""The CSV of the classic blog recipe, made from cyclictest's text output:

    cyclictest ... -h 400 -q > out.txt
    grep -v '^#' out.txt | tr ' ' ',' | tr '\\t' ',' > out.csv
    sed -i '1i time,core1,core2,core3,core4' out.csv

Rows are ``bucket,count,count,...`` ("time" is the latency bucket in µs).
grep keeps the empty line cyclictest prints after its summary, and a header
typed as ``'1i time,...\\n'`` leaves an empty second line, so empty lines and
stray separators are tolerated.  A run that was not quiet also leaves its
status and ``policy:`` lines (commas for spaces, escapes included), and
``--spike`` its spike lines: those are read like the text output's.

What grep removed is lost for good: the summary lines, so the overflow
(samples beyond the histogram) and cyclictest's own max are unknown.
"""

from __future__ import annotations

import re

from .common import NUM, US, Parsed, Source, clean_line, hist_cpu, lowest_highest
from .text import Scan, scan_body, spike_results, status_config

HEADER_RE = re.compile(r"[\s,]*time\s*,(.*)", re.IGNORECASE)
ROW_RE = re.compile(rf"[\s,]*({NUM}(?:[\s,]+{NUM})+)[\s,]*")
CSV_LINE_RE = re.compile(rf"[\s,]*(time\s*,.*|{NUM}(?:[\s,]*,[\s,]*{NUM})+[\s,]*)", re.IGNORECASE)


def looks_like_csv(src: Source) -> bool:
    """A header or a comma-separated row of numbers: cyclictest itself never writes commas."""
    return any(CSV_LINE_RE.fullmatch(clean_line(line)) for line in src.lines[:200])


def _is_histofall(columns: list[list[int]]) -> bool:
    """-H's extra column is the sum of the threads'; require two non-empty
    thread columns so that an idle CPU's zeros cannot fake it."""
    *threads, last = columns
    if len(threads) < 2 or sum(1 for c in threads if any(c)) < 2:
        return False
    return all(sum(vals) == total for *vals, total in zip(*threads, last))


def read_csv(src: Source) -> Parsed:
    header: tuple[int, list[str]] | None = None
    rows: list[list[int]] = []
    row_lines: list[int] = []
    s = Scan()
    for no, raw in enumerate(src.lines, 1):
        line = clean_line(raw)
        if not line.strip(" ,"):
            continue
        if header is None and not rows and (m := HEADER_RE.fullmatch(line)):
            header = (no, [name.strip() for name in m[1].split(",") if name.strip()])
            continue
        if m := ROW_RE.fullmatch(line):
            bucket, *counts = (int(v) for v in re.split(r"[\s,]+", m[1]))
            if bucket != len(rows):
                raise src.error(no, f"expected the row of bucket {len(rows)} (buckets count up from 0), "
                                    f"found bucket {bucket}")
            if rows and len(counts) != len(rows[0]):
                raise src.error(no, f"expected {len(rows[0])} counts like the rows before, found {len(counts)}")
            rows.append(counts)
            row_lines.append(no)
            continue
        # The recipe turned spaces into commas; undo that to read cyclictest's own lines.
        scan_body(src, s, no, line.replace(",", " "))
    if not rows:
        raise src.error(len(src.lines) or 1, "found no histogram rows; expected the CSV made from cyclictest -h "
                                              "output (bucket,count,count,...)")
    columns = [list(c) for c in zip(*rows)]
    warnings = []
    histofall = _is_histofall(columns)
    if histofall:
        columns.pop()
        warnings.append("the last column is the sum of the others, as cyclictest -H writes it, so it was read as "
                        "the all-threads total, not as a CPU; if it is a CPU, import the text output instead")
    if header is not None and len(header[1]) not in (len(columns), len(columns) + histofall):
        raise src.error(header[0], f"the header names {len(header[1])} CPU columns but the rows have "
                                   f"{len(columns) + histofall} counts")
    if not any(any(c) for c in columns):
        raise src.error(row_lines[0], "the histogram holds no samples at all (every one fell beyond its range, "
                                      "as with cyclictest -N); import cyclictest's text output with its '#' lines")
    threads = list(range(len(columns)))
    spikes, top, spike_warnings = spike_results(src, s, threads, US)
    cpus = []
    for j, col in enumerate(columns):
        span = lowest_highest(col)
        cpus.append(hist_cpu(j, col, 0, US, span[0] * US if span else None, None, None, spikes[j]))
    highest = max(lowest_highest(c)[1] for c in columns if any(c))
    warnings.insert(0, (
        f"the CSV keeps only the histogram (grep removed cyclictest's '#' summary lines): how many samples fell "
        f"beyond its {len(rows) - 1} µs range, and the true maximum, are unknown, so no max is given and the "
        f"percentiles are only lower bounds (the highest sample in range is {highest} µs); import the original "
        "text output instead"))
    config = {"threads": len(columns), "histogram_us": len(rows), "resolution_ns": US, **status_config(s)}
    return Parsed(format="cyclictest-csv", cpus=cpus, config=config, warnings=warnings + spike_warnings,
                  top_spikes=top)
