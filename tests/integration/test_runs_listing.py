"""`rtforge runs` over a store of months (issue 34): on a terminal the
newest runs that fit and a line saying how many more and how to see them;
into a pipe every run; filters that combine; --json written as the index
is read, holding no lock on it while its reader waits."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from rich.cells import cell_len

from rtforge.cli import main
from rtforge.results.importers import import_file
from rtforge.results.store.runstore import Store

from ..support.procs import run_on_pty
from ..support.runs import copies

GOLDEN = Path(__file__).parents[1] / "golden" / "cyclictest"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
HOSTS, KERNELS = ("pi4-lab", "pi5-rack"), ("6.12.25-rt8-v8+", "6.1.77-v8+")


@pytest.fixture(scope="module")
def months(tmp_path_factory):
    """An import and 40 copies of it, one every 90 minutes from 2026-01-01,
    hosts and kernels alternating, a label on every tenth; ids oldest first
    (the import, stored last, is the newest)."""
    store = Store(tmp_path_factory.mktemp("months") / "results")
    template = import_file(GOLDEN / "hist.txt", store)
    ids = copies(store, template.run_id, 40, hosts=HOSTS, kernels=KERNELS, label_every=10)
    return store, [*ids, template.run_id]


def on_terminal(store: Store, *args: str, rows: int = 24) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm-256color", RTFORGE_RESULTS_DIR=str(store.root))
    code, out = run_on_pty([sys.executable, "-m", "rtforge", "runs", *args], env, columns=80, rows=rows)
    assert code == 0, out
    lines = ANSI.sub("", out).replace("\r", "").splitlines()
    assert all(cell_len(line) <= 80 for line in lines) and "…" not in out
    return lines


def listed(lines: list[str], ids: list[str]) -> list[str]:
    return [i for i in ids if any(i in line for line in lines)]


def test_a_terminal_shows_the_newest_runs_that_fit_and_how_to_see_the_others(months):
    store, ids = months
    lines = on_terminal(store)
    shown = listed(lines, ids)
    assert len(lines) <= 23                                  # the shell's prompt stays on the screen
    assert len(shown) >= 10 and shown == ids[-len(shown):]   # the newest, in the order they were stored
    assert "by the time each was stored or imported" in lines[0]
    hidden = len(ids) - len(shown)
    footer = " ".join(lines[-2:])
    assert f"{hidden} older runs not shown" in footer
    assert all(option in footer for option in ("--all", "--limit N", "--label", "--host", "--kernel", "--since"))
    assert listed(on_terminal(store, "--all"), ids) == ids
    five = on_terminal(store, "--limit", "5")
    assert listed(five, ids) == ids[-5:] and f"{len(ids) - 5} older runs not shown" in " ".join(five[-2:])
    tiny = on_terminal(store, rows=6)                        # a tiny terminal: still the newest run, and the line
    assert listed(tiny, ids)[-1] == ids[-1] and "older runs not shown" in " ".join(tiny)


def test_a_pipe_gets_every_run(months, rtforge_cmd):
    store, ids = months
    env = {**os.environ, "RTFORGE_RESULTS_DIR": str(store.root)}
    out = subprocess.run([*rtforge_cmd, "runs"], capture_output=True, text=True, env=env, check=True).stdout
    assert listed(out.splitlines(), ids) == ids and "not shown" not in out
    assert len(out.splitlines()) == len(ids) + 3             # the heading, the table's head and rule, a run a line
    out = subprocess.run([*rtforge_cmd, "runs", "--limit", "3"], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert listed(out.splitlines(), ids) == ids[-3:] and f"{len(ids) - 3} older runs not shown" in out


def _copy(i: int) -> dict:
    """What copies() made the i-th copy of."""
    return {"host": HOSTS[i % 2], "kernel": KERNELS[i % 2], "label": f"batch {i // 10}" if i % 10 == 0 else None,
            "hours": i * 1.5}


@pytest.mark.parametrize("args, keep", [
    (["--label", "batch"], lambda c: c["label"] is not None),
    (["--label", "BATCH 2"], lambda c: c["label"] == "batch 2"),         # ASCII case ignored
    (["--host", "rack"], lambda c: c["host"] == "pi5-rack"),
    (["--kernel", "rt8"], lambda c: c["kernel"] == "6.12.25-rt8-v8+"),
    (["--host", "pi", "--since", "2026-01-02T00:00Z"], lambda c: c["hours"] >= 24),
    (["--host", "lab", "--since", "2026-01-02T06:00+06:00"], lambda c: c["host"] == "pi4-lab" and c["hours"] >= 24),
    (["--kernel", "6.1.", "--label", "batch"], lambda c: c["kernel"] == "6.1.77-v8+" and c["label"] is not None),
    (["--host", "lab", "--limit", "2"], None),
    (["--host", "%"], lambda c: False),                                  # a LIKE wildcard is a character here
])
def test_filters_combine(months, capsys, args, keep):
    store, ids = months
    assert main(["runs", "--json", *args, "--results-dir", str(store.root)]) == 0
    got = [r["run_id"] for r in json.loads(capsys.readouterr().out)]
    if keep is None:   # the newest two from pi4-lab
        assert got == [i for n, i in enumerate(ids[:-1]) if n % 2 == 0][-2:]
    else:
        assert got == [i for n, i in enumerate(ids[:-1]) if keep(_copy(n))]


def test_a_filter_that_keeps_nothing_says_so(months, capsys):
    store, ids = months
    assert main(["runs", "--host", "rack", "--kernel", "rt8", "--results-dir", str(store.root)]) == 0
    assert capsys.readouterr().out == f"no run of the {len(ids)} stored matches: `rtforge runs` lists them all\n"


@pytest.mark.parametrize("args, says", [
    (["--limit", "0"], "--limit wants a whole number"),
    (["--limit", "ten"], "--limit wants a whole number"),
    (["--limit", "２"], "--limit wants a whole number"),
    (["--limit", "1_000"], "--limit wants a whole number"),
    (["--all", "--limit", "3"], "--all and --limit contradict"),
    (["--since", "yesterday"], "--since 'yesterday' is not a date"),
    (["--since", "2026-02-30"], "is not a day of the calendar"),
    (["--since", "99999999999d"], "out of range"),
    (["--since", "7"], "is not a date"),
    (["--label", ""], "--label is empty"),
    (["--host", "pi\x1b[31m"], "holds a control character"),
    (["--kernel", "6" * 300], "--kernel is 300 characters long"),
])
def test_bad_filters_are_one_sentence(months, capsys, args, says):
    store, _ = months
    assert main(["runs", *args, "--results-dir", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_json_is_written_as_the_index_is_read_and_holds_no_lock(tmp_path, rtforge_cmd):
    """While `runs --json` waits for its reader (a full pipe), another rtforge
    deletes the newest run: the delete does not wait for the listing, and the
    listing, reading the index a page at a time, no longer lists the run."""
    store = Store(tmp_path / "results")
    template = import_file(GOLDEN / "hist.txt", store)
    ids = [*copies(store, template.run_id, 1200), template.run_id]
    assert len(store.all_rows()) == len(ids)   # the index, current
    env = {**os.environ, "RTFORGE_RESULTS_DIR": str(store.root)}
    listing = subprocess.Popen([*rtforge_cmd, "runs", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=env)
    try:
        # half the pipe written: the listing is in its first page of 500 runs (~200 kB), where a full pipe stops it
        pipe = listing.stdout.fileno()
        size = fcntl.fcntl(pipe, 1032)   # F_GETPIPE_SZ
        deadline = time.monotonic() + 60
        while int.from_bytes(fcntl.ioctl(pipe, termios.FIONREAD, b"\0" * 4), sys.byteorder) < size // 2:
            assert time.monotonic() < deadline and listing.poll() is None, "the listing never filled its pipe"
            time.sleep(0.05)
        deleted = subprocess.run([*rtforge_cmd, "delete", ids[-1], "--yes"], capture_output=True, text=True,
                                 env=env, timeout=20)
        assert deleted.returncode == 0, deleted.stderr
        out, err = listing.communicate(timeout=60)
    finally:
        listing.kill()
    assert listing.returncode == 0, err
    assert [r["run_id"] for r in json.loads(out)] == ids[:-1]
