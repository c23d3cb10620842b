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

import itertools
import re

import numpy as np

from .common import NUM, US, Parsed, Source, clean_line, column_sums, sparse_cpu
from .rows import Rows
from .spikes import spike_results
from .text import Scan, scan_body, status_config

HEADER_RE = re.compile(r"[\s,]*time\s*,(.*)", re.IGNORECASE)
ROW_RE = re.compile(rf"[\s,]*({NUM}(?:[\s,]+{NUM})+)[\s,]*")
CSV_LINE_RE = re.compile(rf"[\s,]*(time\s*,.*|{NUM}(?:[\s,]*,[\s,]*{NUM})+[\s,]*)", re.IGNORECASE)


def looks_like_csv(src: Source) -> bool:
    """A header or a comma-separated row of numbers: cyclictest itself never writes commas."""
    return any(CSV_LINE_RE.fullmatch(clean_line(line)) for _, line in itertools.islice(src.lines(), 200))


def _is_histofall(counts: np.ndarray) -> bool:
    """-H's extra column is the sum of the threads'; require two non-empty
    thread columns so that an idle CPU's zeros cannot fake it."""
    threads, last = counts[:, :-1], counts[:, -1]
    if threads.shape[1] < 2 or int((threads.sum(axis=0) > 0).sum()) < 2:
        return False
    return bool((threads.sum(axis=1) == last).all())


def read_csv(src: Source) -> Parsed:
    header: tuple[int, list[str]] | None = None
    rows = Rows()
    s = Scan()
    for no, raw in src.lines():
        line = clean_line(raw)
        if not line.strip(" ,"):
            continue
        if header is None and not rows.read and (m := HEADER_RE.fullmatch(line)):
            header = (no, [name.strip() for name in m[1].split(",") if name.strip()])
            continue
        if ROW_RE.fullmatch(line) and rows.add(src, no, re.sub(r"[\s,]+", " ", line).strip()):
            continue
        # The recipe turned spaces into commas; undo that to read cyclictest's own lines.
        scan_body(src, s, no, line.replace(",", " "))
    if not rows.read:
        raise src.error(s.last_line or 1, "found no histogram rows; expected the CSV made from cyclictest -h "
                                          "output (bucket,count,count,...)")
    buckets, _, counts = rows.matrix()
    warnings = []
    histofall = _is_histofall(counts)
    if histofall:
        counts = counts[:, :-1]
        warnings.append("the last column is the sum of the others, as cyclictest -H writes it, so it was read as "
                        "the all-threads total, not as a CPU; if it is a CPU, import the text output instead")
    ncols = counts.shape[1]
    if header is not None and len(header[1]) not in (ncols, ncols + histofall):
        raise src.error(header[0], f"the header names {len(header[1])} CPU columns but the rows have "
                                   f"{ncols + histofall} counts")
    sums = column_sums(counts)
    if not any(sums):
        raise src.error(rows.first_line or 1, "the histogram holds no samples at all (every one fell beyond its range, "
                                         "as with cyclictest -N); import cyclictest's text output with its '#' lines")
    threads = list(range(ncols))
    spikes, top, spike_warnings = spike_results(src, s, threads, US)
    cpus = []
    for j in threads:
        used = buckets[counts[:, j] > 0]
        lowest = int(used[0]) * US if used.size else None
        cpu = sparse_cpu(j, buckets, counts[:, j], 0, US, rows.last, lowest, None, None, spikes[j])
        cpu.hist.overflow_known = False  # grep removed the '# Histogram Overflows:' line: not 0, unknown
        cpus.append(cpu)
    highest = max(int(buckets[counts[:, j] > 0][-1]) for j in threads if sums[j])
    warnings.insert(0, (
        f"the CSV keeps only the histogram (grep removed cyclictest's '#' summary lines): how many samples fell "
        f"beyond its {rows.last} µs range, and the true maximum, are unknown, so no max is given and the "
        f"percentiles are only lower bounds (the highest sample in range is {highest} µs); import the original "
        "text output instead"))
    config = {"threads": ncols, "histogram_us": rows.size, "resolution_ns": US, **status_config(s)}
    return Parsed(format="cyclictest-csv", cpus=cpus, config=config, warnings=warnings + spike_warnings,
                  top_spikes=top)
