"""`rtforge latency`'s option parsing under generated values: it ends in exit
status 0, 2 or 130, never a traceback, and a refused command stores nothing.

Only the validation is under test, so no measurement starts: every run that
passes all checks -- tools, privileges, the probe copied into the run's
folder and its metadata read, the run saved in the store -- is interrupted
right before its runner would start (as a Ctrl-C there would), which must
leave nothing stored either."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtforge.cli import latency as latency_cli
from rtforge.cli import main
from rtforge.measure import session

from ..support.runs import left_in

pytestmark = pytest.mark.root

NASTY = ["", " ", "0", "-1", "1", "9", "10", "99", "100", "200", "1000000", "99999999999", "1e300", "nan", "inf",
         "-inf", "1.5", "0.5", "２", "２s", "１０", "1_000", "0x10", "1e3", "10s", "1h", "101d", "100d", "1d",
         "0-1", "0-99999999999", "1-0", "0,1", "a", "none", "cpu", "cpu,io", "net", "together", "spread", "fifo",
         "rr", "probe", "cyclictest", "\x00", "\n", "'; rm -rf /", "é", "0." + "0" * 40 + "1"]
VALUE = st.one_of(st.sampled_from(NASTY), st.text(max_size=12), st.integers(-10**20, 10**20).map(str),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr))
OPTIONS = ["--duration", "--loops", "--interval-us", "--priority", "--policy", "--cpus", "--load", "--engine",
           "--phase", "--spike-us", "--histogram-us", "--settle-s"]


def interrupted_before_start(real):
    """run_latency as the CLI calls it, stopped right before the runner starts."""
    def run(spec, store, transport=None, **kw):
        def on_launch(run):
            raise KeyboardInterrupt
        kw["on_launch"] = on_launch
        return real(spec, store, transport, **kw)
    return run


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(st.tuples(st.sampled_from(OPTIONS), VALUE), max_size=4))
def test_generated_options_end_in_0_2_or_130_and_a_refusal_stores_nothing(args, capsys):
    argv = [x for pair in args for x in pair]
    if "\x00" in "".join(argv):  # no process can be given a NUL in an argument
        return
    rd = Path(tempfile.mkdtemp(prefix="rtforge-fuzz-"))
    try:
        with mock.patch.object(latency_cli.session, "run_latency", interrupted_before_start(session.run_latency)):
            capsys.readouterr()
            rc = main(["latency", *argv, "--results-dir", str(rd / "results")])
        err = capsys.readouterr().err
        assert rc in (0, 2, 130), (argv, rc, err)
        assert "Traceback" not in err, (argv, err)
        if rc == 2:
            assert len(err.strip().splitlines()) == 1, (argv, err)
        runs = rd / "results" / "runs"
        assert left_in(runs) == [], (argv, rc, err, left_in(runs))
    finally:
        shutil.rmtree(rd, ignore_errors=True)
