"""The commands a user (or a fleet, once per board) runs most often start
without numpy and matplotlib: each is ~0.1-0.3 s of a command that otherwise
takes ~0.3 s.  Checked in a fresh interpreter, by what it has imported when
the command has ended (not by timing it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from rtforge.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted(m for m in ("numpy", "matplotlib") if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["runs"], ["show", "last"], ["--help"], ["latency", "--help"], ["fleet", "--help"],
                                  ["kernel", "--help"], ["bench", "--help"]])
def test_a_command_that_needs_no_numbers_loads_no_numpy(argv, tmp_path):
    p = subprocess.run([sys.executable, "-c", PROBE, *argv, *(["--results-dir", str(tmp_path)]
                        if argv[0] in ("runs", "show") else [])], capture_output=True, text=True, timeout=60)
    assert p.stderr.strip().splitlines()[-1] == "[]", p.stderr[-2000:]


def test_the_check_can_fail(tmp_path):
    """Showing a bench run needs the bench's display, which imports numpy: seen."""
    from rtforge.results.store.runstore import Store

    from ...support.runs import bench_run

    run = bench_run(Store(tmp_path), "rt", {1: 20.0})
    p = subprocess.run([sys.executable, "-c", PROBE, "show", run.run_id, "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.stderr.strip().splitlines()[-1] == "['numpy']", p.stderr[-2000:]
