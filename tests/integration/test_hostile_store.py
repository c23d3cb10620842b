"""Hostile input, round two (issue 22): a store copied from elsewhere is
data, never code or a way out of the store.  Each test is an attack found
by the adversarial pass, with the outcome a careful storage engineer wants."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtforge import procfs
from rtforge.cli import main
from rtforge.measure.lifecycle import boot_id
from rtforge.results.importers import import_file
from rtforge.results.store.runstore import Store

GOLDEN = Path(__file__).parents[1] / "golden" / "cyclictest"


def running_run(store: Store, owner: dict | None = None) -> Path:
    """An imported run turned into a 'running' one whose owner is gone, as a
    copied or restored store may hold it; its folder."""
    r = import_file(GOLDEN / "run.json", store)
    folder = store.run_dir(r.run_id)
    doc = json.loads((folder / "result.json").read_text())
    doc.update(state="running", engine="probe", owner=owner or {"pid": 999_999_999, "start_ticks": 1})
    (folder / "result.json").write_text(json.dumps(doc))
    (folder / "raw" / "runner").mkdir(parents=True)
    return folder


def cli(argv, capsys, store: Store):
    code = main([*argv, "--results-dir", str(store.root)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_runner_found_in_a_run_folder_is_never_run(tmp_path, store, capsys):
    folder = running_run(store)
    planted = tmp_path / "pwned"
    (folder / "runner.sh").write_text(f"touch {planted}\necho running\n")
    (folder / "raw" / "runner" / "runner.pid").write_text(f"1 1 {boot_id()}\n")
    for argv in (["runs"], ["show", "last"], ["compare", "last"]):
        code, out, err = cli(argv, capsys, store)
        assert code == 0, err
    assert not planted.exists()
    assert store.load(folder.name).state == "killed"      # settled from what it has, by rtforge's own runner


def test_pid_files_that_name_other_processes_are_inert(tmp_path, store, capsys):
    """A planted engine.pid naming a live process of this user (right pid, start time and boot)
    must not get it signalled: the runner signals only processes carrying the run's mark."""
    victim = subprocess.Popen(["sleep", "60"])
    try:
        ticks = procfs.start_ticks(victim.pid)
        folder = running_run(store, {"pid": 999_999_999, "start_ticks": 1, "boot_id": boot_id()})
        runner = folder / "raw" / "runner"
        (runner / "runner.pid").write_text(f"{victim.pid} {ticks} {boot_id()}\n")   # "alive" but not ours
        (runner / "engine.pid").write_text(f"{victim.pid} {ticks}\n")
        (runner / "loads.pids").write_text(f"{victim.pid} {ticks} 00-cpu\n")
        code, _, err = cli(["runs"], capsys, store)
        assert code == 0, err
        time.sleep(0.3)
        assert victim.poll() is None                        # still running
        assert store.load(folder.name).state == "killed"    # and the run is settled, not left "running"
    finally:
        victim.kill()
        victim.wait()


def test_a_symlinked_index_is_not_followed_and_a_foreign_one_not_altered(tmp_path, store, capsys):
    import_file(GOLDEN / "hist.txt", store)
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE runs (id INTEGER, payload TEXT)")
        db.execute("INSERT INTO runs VALUES (1, 'precious')")
    before = other.read_bytes()
    index = store.root / "runs.db"
    index.unlink()
    index.symlink_to(other)
    code, out, err = cli(["runs"], capsys, store)
    assert code == 0 and "hist" in out and "does not follow it" in err
    assert other.read_bytes() == before
    index.unlink()
    index.write_bytes(before)   # a foreign database where the index belongs
    code, out, err = cli(["runs"], capsys, store)
    assert code == 0 and "hist" in out and "not an rtforge index" in err
    assert index.read_bytes() == before
    index.unlink()
    index.symlink_to(tmp_path / "nowhere.db")                        # a dangling link creates nothing
    assert cli(["runs"], capsys, store)[0] == 0
    assert not (tmp_path / "nowhere.db").exists()


@pytest.mark.parametrize("plant", ["/dev/zero link", "huge file", "fifo", "raw link"])
def test_raw_files_are_read_bounded_regular_and_inside(tmp_path, store, capsys, plant):
    folder = running_run(store)
    raw = folder / "raw"
    if plant == "/dev/zero link":
        (raw / "probe.json").symlink_to("/dev/zero")
    elif plant == "huge file":
        with open(raw / "probe.json", "wb") as f:
            f.truncate(300 << 20)   # sparse: 300 MiB on paper, more than a probe.json may be
    elif plant == "fifo":
        (raw / "probe.json").write_text("{}")
        os.mkfifo(raw / "series.jsonl")
    else:
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        (outside / "probe.json").write_text('{"probe_format": 1}')
        (raw / "runner").rmdir()
        raw.rename(folder / "raw.orig")
        raw.symlink_to(outside)
    # in a child with a deadline: a FIFO read would hang, /dev/zero grow without end
    r = subprocess.run([sys.executable, "-m", "rtforge", "runs", "--results-dir", str(store.root)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    settled = store.load(folder.name)
    assert settled.state == "killed" and any("could not be read" in w for w in settled.warnings)


@pytest.mark.slow
def test_two_imports_of_one_file_at_once_store_it_once(tmp_path):
    store = Store(tmp_path / "results")
    argv = [sys.executable, "-m", "rtforge", "import", str(GOLDEN / "hist.txt"), "--results-dir", str(store.root)]
    for _ in range(5):
        procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
        codes = sorted(p.wait(timeout=120) for p in procs)
        assert codes == [0, 2] or codes == [2, 2]          # never two runs of one file
        assert len(store.all_rows()) == 1
        if codes == [0, 2]:
            for r in store.all_rows():
                store.remove(r.run_id)


@pytest.mark.slow
@pytest.mark.root
def test_ctrl_c_while_the_loads_settle_keeps_the_run(tmp_path):
    rd = str(tmp_path / "results")
    p = subprocess.Popen([sys.executable, "-m", "rtforge", "latency", "--duration", "10s", "--load", "cpu",
                          "--settle-s", "6", "--results-dir", rd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.monotonic() + 30
    runs = Path(rd) / "runs"
    while time.monotonic() < deadline and not any(runs.glob("*/raw/runner/loads.pids")):
        time.sleep(0.1)   # the loads are starting: the settle time has begun
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=90)
    assert p.returncode == 130 and "Traceback" not in err
    [row] = Store(rd).all_rows()
    assert row.state == "interrupted" and row.loads == "cpu"
    assert "interrupted before measuring began" in out


@pytest.mark.parametrize("value", ["Fri, 31 Dec 9999 23:59:59 -1200", 12345])
def test_an_odd_start_time_in_a_json_file_is_left_unknown(tmp_path, store, value):
    doc = json.loads((GOLDEN / "run.json").read_text())
    doc["start_time"] = doc["end_time"] = value
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    r = import_file(path, store)
    assert r.start_time                             # the file's own time is unusable: its mtime stands in
    # and its length is the one its wake-ups and interval give, not its times'
    assert r.config["duration_source"] == "cycles × interval"
    assert r.duration_s == max(c.count for c in r.cpus) * r.config["interval_us"] / 1e6


@pytest.mark.parametrize("plant", ["a link out", "a file"])
def test_the_stores_scratch_is_never_followed_out_of_the_store(tmp_path, store, capsys, plant):
    """runs/.tmp, where imports are built and deleted runs go, replaced by a
    link to elsewhere or a file: import and delete refuse, nothing is written there."""
    kept = import_file(GOLDEN / "hist.txt", store)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(store.scratch)
    if plant == "a link out":
        store.scratch.symlink_to(elsewhere)
    else:
        store.scratch.write_text("not a folder")
    for argv in (["import", str(GOLDEN / "run.json")], ["delete", kept.run_id, "--yes"]):
        code, _, err = cli(argv, capsys, store)
        assert code == 2 and "is not a folder of the store" in err and err.count("\n") == 1, (argv, err)
    assert list(elsewhere.iterdir()) == []
    assert [r.run_id for r in store.all_rows()] == [kept.run_id]


def test_closed_stdout_ascii_terminals_and_an_early_ctrl_c_are_one_line(tmp_path, store):
    import_file(GOLDEN / "hist.txt", store)
    rtforge = [sys.executable, "-m", "rtforge"]
    env = {**os.environ, "RTFORGE_RESULTS_DIR": str(store.root)}
    closed = subprocess.run(["sh", "-c", '"$@" >&-', "sh", *rtforge, "runs"], capture_output=True, text=True, env=env)
    assert closed.returncode == 2 and closed.stderr.count("\n") == 1 and "standard output is closed" in closed.stderr
    ascii_ = subprocess.run([*rtforge, "show", "last"], capture_output=True, text=True,
                            env={**env, "PYTHONIOENCODING": "ascii"})
    assert ascii_.returncode == 0 and "Traceback" not in ascii_.stderr and "\\xb5s" in ascii_.stdout
    # Ctrl-C once the process has run this much CPU time (ticks of 10 ms): past the interpreter's own
    # start-up (~3), inside the import of the command line (~30 in all), then after it.  CPU time, not
    # wall time: on a loaded host a fixed 50 ms could land in the interpreter's start-up, whose
    # KeyboardInterrupt no code of rtforge can catch yet.
    for ticks in (8, 60):
        p = subprocess.Popen([*rtforge, "runs"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        _wait_cpu(p.pid, ticks)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        # never a traceback; the one line once rtforge's own code runs (before the interpreter has its
        # handler, the signal's default action ends it: -SIGINT, nothing said)
        assert "Traceback" not in err and err.strip() in ("", "rtforge: interrupted"), err
        assert p.returncode in (0, 130, -signal.SIGINT), (p.returncode, err)


def _wait_cpu(pid: int, ticks: int, timeout: float = 30) -> None:
    """Until process pid has used `ticks` clock ticks of CPU (or ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = procfs.stat_fields(pid)
        if not st or st[0] == "Z" or int(st[11]) + int(st[12]) >= ticks:
            return
        time.sleep(0.002)


@pytest.mark.parametrize("argv, says", [
    (["latency", "--stop", "abc", "--duration", "5s"], "--stop ends a run that is going"),
    (["latency", "--label", "x" * 10_000], "give one of at most 200"),
    (["report", "last", "--cycle-time", "２ms"], "is not a duration"),
    (["report", "last", "--cycle-time", "99999999999999999999ms"], "out of range"),
])
def test_inconsistent_options_are_refused(tmp_path, store, capsys, argv, says):
    import_file(GOLDEN / "hist.txt", store)
    code, _, err = cli(argv, capsys, store)
    assert code == 2 and says in err and err.count("\n") == 1


def test_a_store_path_that_cannot_be_a_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert main(["runs", "--results-dir", str(tmp_path / "a")]) == 2
    assert "loop of symbolic links" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["runs", "--results-dir", str(tmp_path / "file" / "rtforge")]) == 2
    assert "below a file" in capsys.readouterr().err


@pytest.mark.root
def test_a_full_disk_during_latency_is_said_as_such(tmp_path, capsys):
    """Once only `tar: Exiting with failure status`: now what filled up, and what to do."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=60k", "tmpfs", str(mnt)], check=True)
    try:
        code = main(["latency", "--duration", "2s", "--results-dir", str(mnt / "store")])
        err = capsys.readouterr().err
        assert code == 2 and "No space left on device" in err and "disk is full" in err and err.count("\n") == 1
        assert not any((mnt / "store" / "runs").glob("2*"))   # nothing half-written kept
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
