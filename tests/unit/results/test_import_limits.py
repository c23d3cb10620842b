"""What `rtforge import` reads: only a regular file, at most 1 GiB, streamed.
A FIFO once hung it, /dev/zero ran it out of memory, and a valid 208 MB
histogram took 3.4 GB."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.store.runstore import Store

from ...support.runs import left_in

GOLDEN = Path(__file__).parents[2] / "golden" / "cyclictest"


def _import(rtforge_cmd, path, results, timeout=60):
    p = subprocess.run([*rtforge_cmd, "import", str(path), "--results-dir", str(results)], capture_output=True,
                       text=True, timeout=timeout)
    assert "Traceback" not in p.stderr
    return p


@pytest.mark.parametrize("what", ["a FIFO", "/dev/zero", "/dev/urandom", "a folder", "a socket"])
def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path, rtforge_cmd, what):
    target = {"/dev/zero": Path("/dev/zero"), "/dev/urandom": Path("/dev/urandom")}.get(what, tmp_path / "x")
    sock = None
    if what == "a FIFO":
        os.mkfifo(target)
    elif what == "a folder":
        target.mkdir()
    elif what == "a socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
    try:
        p = _import(rtforge_cmd, target, tmp_path / "results", timeout=30)  # a hang fails here
    finally:
        if sock:
            sock.close()
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "regular file" in p.stderr or "is a directory" in p.stderr
    assert left_in(tmp_path / "results" / "runs") == []


def test_a_file_too_large_to_be_cyclictest_output_is_refused_unread(tmp_path, capsys):
    big = tmp_path / "huge.txt"
    with open(big, "wb") as f:  # sparse: takes no disk
        f.truncate((1 << 30) + 1)
    assert main(["import", str(big), "--results-dir", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "larger than any cyclictest output" in err and err.count("\n") == 1
    assert not (tmp_path / "results").exists()  # refused before anything was copied


def histogram(path: Path, threads: int, rows: int) -> dict:
    """A valid -h output with every row printed, almost all empty; returns its truth."""
    zeros = "\t".join(["000000"] * threads)
    head = {5: 700, 6: 250, 7: 40}           # bucket -> count for every thread
    tail = {rows - 3: 1}                       # one late sample, thread 0 only
    with open(path, "w") as f:
        f.write("# /dev/cpu_dma_latency set to 0us\n# Histogram\n")
        chunk = []
        for k in range(rows):
            if k in head:
                chunk.append(f"{k:06d} " + "\t".join([f"{head[k]:06d}"] * threads) + "\n")
            elif k in tail:
                chunk.append(f"{k:06d} " + "\t".join(["000001"] + ["000000"] * (threads - 1)) + "\n")
            else:
                chunk.append(f"{k:06d} {zeros}\n")
            if len(chunk) == 10_000:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))
        totals = [sum(head.values()) + (1 if t == 0 else 0) for t in range(threads)]
        avg = [(5 * 700 + 6 * 250 + 7 * 40 + (rows - 3 if t == 0 else 0)) // totals[t] for t in range(threads)]
        maxes = [rows - 3 if t == 0 else 7 for t in range(threads)]
        f.write("# Total: " + " ".join(f"{v:09d}" for v in totals) + "\n")
        f.write("# Min Latencies: " + " ".join(["00005"] * threads) + "\n")
        f.write("# Avg Latencies: " + " ".join(f"{v:05d}" for v in avg) + "\n")
        f.write("# Max Latencies: " + " ".join(f"{v:05d}" for v in maxes) + "\n")
        f.write("# Histogram Overflows: " + " ".join(["00000"] * threads) + "\n")
        f.write("# Histogram Overflow at cycle number:\n")
        f.write("".join(f"# Thread {t}:\n" for t in range(threads)))
    return {"counts": totals, "max_us": maxes}


MEASURE = """
import json, resource, sys
from rtforge.results.importers import import_file
from rtforge.results.store.runstore import Store
r = import_file(sys.argv[1], Store(sys.argv[2]))
print(json.dumps({"peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "counts": [c.count for c in r.cpus], "max_us": [c.max_ns // 1000 for c in r.cpus]}))
"""


def test_a_large_histogram_is_streamed(tmp_path):
    """A 64 MB valid histogram: read row by row, so the import's peak memory
    stays below the file's own size (the old reader held it three times over)."""
    path = tmp_path / "big.txt"
    truth = histogram(path, threads=32, rows=290_000)
    size_mb = path.stat().st_size / 2**20
    assert size_mb > 60
    p = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(tmp_path / "results")], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["counts"] == truth["counts"] and got["max_us"] == truth["max_us"]
    interpreter = ("import resource, rtforge.results.importers, rtforge.results.store.runstore;"
                   "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    baseline = subprocess.run([sys.executable, "-c", interpreter], capture_output=True, text=True, check=True)
    used_mb = (got["peak_kb"] - int(baseline.stdout)) / 1024
    assert used_mb < size_mb / 2, f"the import of {size_mb:.0f} MB used {used_mb:.0f} MB above the interpreter's"
    [run] = Store(tmp_path / "results").all_rows()
    assert (tmp_path / "results" / "runs" / run.run_id / "raw" / "big.txt").stat().st_size == path.stat().st_size
