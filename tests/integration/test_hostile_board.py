"""Hostile neighbours (issue 32): a board shared with other users, files
planted where rtforge reads and writes.  The board is the tests' loopback
sshd; the neighbour is the session's second login (no sudo), who can write
/var/tmp and /tmp as any user can.  Each test is an attack that worked on
the code before, with the outcome a careful engineer wants: no planted
program runs, no file outside rtforge's own folders changes, every refusal
is one sentence naming the folder and its owner."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device import SshTransport
from rtforge.errors import UserError
from rtforge.measure.launch import start_run
from rtforge.measure.spec import LatencySpec
from rtforge.results.store.runstore import Store

from .test_hostile_store import cli, running_run

pytestmark = pytest.mark.root


def as_user(user: str, script: str, *args: str) -> None:
    """Run a shell script as the board's other login."""
    subprocess.run(["runuser", "-u", user, "--", "sh", "-c", script, "sh", *args], check=True)


@pytest.fixture
def neighbour(sshd) -> str:
    return sshd.users["nosudo"]


@pytest.fixture
def shared_dir():
    """A folder in /tmp, as a neighbour would make one (world-writable /tmp is everyone's)."""
    d = Path(tempfile.mkdtemp(prefix="rtforge-neighbour-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow   # fetches from the session's one board: alone, not beside another test's run
def test_a_run_folder_planted_in_var_tmp_is_never_run(sshd, neighbour, tmp_path, capsys):
    """The board folder was /var/tmp/rtforge, which any user could make first:
    a runner.sh planted there ran as root at the next `rtforge fetch`."""
    marker = Path(tempfile.mkdtemp(prefix="rtforge-marker-")) / "pwned"
    marker.parent.chmod(0o777)
    planted = Path("/var/tmp/rtforge")
    aside = planted.with_name(f"rtforge.aside-{os.getpid()}")   # an older rtforge's, kept
    if planted.exists():
        planted.rename(aside)
    try:
        as_user(neighbour, 'd=/var/tmp/rtforge/runs/20260101-000000-pi-0001; mkdir -p "$d/raw/runner" && '
                'printf "touch %s\\necho running\\n" "$1" > "$d/runner.sh" && '
                'echo "{}" > "$d/raw/runner/run.json" && echo running > "$d/raw/runner/state"', str(marker))
        for login in ("board", "board-sudo"):
            code = main(["fetch", login, "--ssh-config", str(sshd.ssh_config), "--results-dir", str(tmp_path)])
            capsys.readouterr()
            assert code in (0, 2)
        assert not marker.exists()
    finally:
        shutil.rmtree(planted, ignore_errors=True)
        if aside.exists():
            aside.rename(planted)
        shutil.rmtree(marker.parent, ignore_errors=True)


def _start(sshd, base: Path, tmp_path: Path, login: str = "board"):
    spec = LatencySpec(duration_s=1, interval_us=1000, loads=[])
    return start_run(spec, Store(tmp_path / "store"), SshTransport(login, ssh_config=sshd.ssh_config),
                     base=str(base))


@pytest.mark.parametrize("how", ["owned by the neighbour", "writable by all", "a link"])
def test_a_board_folder_another_user_made_or_can_write_is_refused(sshd, neighbour, shared_dir, tmp_path, how):
    base = shared_dir / "rtforge"
    if how == "a link":
        (shared_dir / "elsewhere").mkdir()
        base.symlink_to(shared_dir / "elsewhere")
    else:
        base.mkdir()
        if how == "owned by the neighbour":
            os.chown(base, pwd.getpwnam(neighbour).pw_uid, -1)
        else:
            base.chmod(0o777)
    before = sorted(p.name for p in shared_dir.rglob("*"))
    with pytest.raises(UserError) as e:
        _start(sshd, base, tmp_path)
    said = str(e.value)
    assert said.startswith("on board: ") and str(base) in said and "\n" not in said
    if how == "owned by the neighbour":
        assert f"belongs to {neighbour}" in said
    elif how == "writable by all":
        assert "can be written by other users" in said
    else:
        assert "symbolic link" in said
    assert sorted(p.name for p in shared_dir.rglob("*")) == before   # nothing was put in it


def test_the_start_lock_is_not_opened_through_a_link(sshd, shared_dir, tmp_path):
    """The runner took its start lock with `exec 9> BASE/lock`: a link there
    emptied the file it named.  It locks the folder itself now."""
    base = shared_dir / "rtforge"
    (base / "runs").mkdir(parents=True)
    base.chmod(0o755)
    (base / "runs").chmod(0o700)
    victim = shared_dir / "victim"
    victim.write_text("precious\n")
    (base / "lock").symlink_to(victim)
    started = _start(sshd, base, tmp_path)
    try:
        assert victim.read_text() == "precious\n"
    finally:
        started.run.stop()
        subprocess.run(["sh", "-c", 'for i in $(seq 50); do grep -q "^[a-z]* " "$1" 2>/dev/null || sleep 0.1; done',
                        "sh", str(Path(started.run.dir) / "raw/runner/state")], timeout=30)


def test_settling_a_planted_run_writes_through_no_link(tmp_path, store, capsys):
    """A stale run whose raw/runner/ holds links (a copied or planted store):
    settling it ran the runner's reap, whose writes followed them."""
    from rtforge.measure.lifecycle import boot_id

    folder = running_run(store, {"pid": 999_999_999, "start_ticks": 1, "boot_id": boot_id()})
    victims = {}
    for name in ("state.tmp", "trace.stop", "events"):
        v = tmp_path / f"victim-{name}"
        v.write_text("precious\n")
        (folder / "raw" / "runner" / name).symlink_to(v)
        victims[name] = v
    (folder / "raw" / "runner" / "runner.pid").write_text(f"1 1 {boot_id()}\n")
    (folder / "raw" / "runner" / "trace.pid").write_text("1 1\n")
    code, _, err = cli(["runs"], capsys, store)
    assert code == 0, err
    assert {n: v.read_text() for n, v in victims.items()} == {n: "precious\n" for n in victims}
    assert store.load(folder.name).state == "killed"      # settled from what it has


@pytest.mark.slow   # runs on the session's one board: alone, not beside another test's run
def test_fetch_stores_a_run_under_the_id_it_was_fetched_from(sshd, tmp_path, capsys):
    """A board's run.json named another stored run's id: fetch replaced that
    run's result.  Now the board's word must agree with its folder."""
    from rtforge.measure.runner import BASE_DIR

    store = Store(tmp_path / "store")
    rd = ["--results-dir", str(store.root)]
    cfg = ["--ssh-config", str(sshd.ssh_config)]
    assert main(["latency", "board", *cfg, *rd, "--duration", "1s", "--label", "victim"]) == 0
    victim = store.all_rows()[0].run_id
    victim_result = (store.run_dir(victim) / "result.json").read_bytes()
    capsys.readouterr()
    assert main(["latency", "board", *cfg, *rd, "--duration", "1s", "--detach"]) == 0
    other = capsys.readouterr().out.strip()   # --detach prints the run's id
    doc_path = Path(BASE_DIR, "runs", other, "raw/runner/run.json")
    subprocess.run(["sh", "-c", 'for i in $(seq 100); do grep -qx done "$1" && exit; sleep 0.1; done',
                    "sh", str(Path(BASE_DIR, "runs", other, "raw/runner/state"))], timeout=30)
    doc = json.loads(doc_path.read_text())
    doc["run_id"] = victim
    doc_path.write_text(json.dumps(doc))
    code = main(["fetch", "board", *cfg, *rd])
    out, err = capsys.readouterr()
    assert (store.run_dir(victim) / "result.json").read_bytes() == victim_result
    assert code == 2 and f"calls itself '{victim}'" in err and len(err.strip().splitlines()) == 1
    shutil.rmtree(Path(BASE_DIR, "runs", other), ignore_errors=True)


@pytest.mark.slow
def test_the_textfile_is_written_through_no_planted_name(tmp_path, capsys):
    """node_exporter's folder is often group-writable: whoever can write it
    planted the probe's fixed temporary name as a link, and root wrote the
    file it named.  The temporary name is mkstemp's now."""
    textfile, state = tmp_path / "textfile", tmp_path / "state"
    textfile.mkdir()
    textfile.chmod(0o775)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (textfile / ".rtforge.prom.tmp").symlink_to(victim)
    assert main(["monitor", "run", "--window", "1s", "--for", "2s", "--state-dir", str(state),
                 "--textfile-dir", str(textfile)]) == 0
    capsys.readouterr()
    assert victim.read_text() == "precious\n"
    assert "rtforge_kernel_info" in (textfile / "rtforge.prom").read_text()


def test_a_monitor_folder_another_user_owns_is_refused(neighbour, shared_dir, capsys):
    state = shared_dir / "monitor"
    state.mkdir()
    os.chown(state, pwd.getpwnam(neighbour).pw_uid, -1)
    assert main(["monitor", "run", "--window", "1s", "--for", "2s", "--state-dir", str(state)]) == 2
    err = capsys.readouterr().err
    assert str(state) in err and "belongs to another user" in err and len(err.strip().splitlines()) == 1
    assert list(state.iterdir()) == []


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)
    return path


@pytest.mark.slow
def test_fifos_and_devices_are_refused_within_seconds(tmp_path, capsys):
    """Each of these waited forever (a FIFO) or read until memory ran out
    (a link to /dev/zero): one sentence now, exit 2 (or the file skipped)."""
    import time

    from rtforge.results.importers import import_file

    from ..support.simboard import copy_tree, remove_tree

    tree = copy_tree("pi4")
    try:
        for kind in ("fifo", "zero"):
            cmdline = tree / "proc/cmdline"
            cmdline.unlink()
            if kind == "fifo":
                fifo(cmdline)
            else:
                cmdline.symlink_to("/dev/zero")
            for argv in (["doctor", "--sysroot", str(tree), "--window-s", "0"],
                         ["tune", "--sysroot", str(tree), "--dry-run"]):
                t0 = time.monotonic()
                code = main(argv)
                capsys.readouterr()
                assert code in (0, 1, 2) and time.monotonic() - t0 < 30, (kind, argv)
    finally:
        remove_tree(tree)
    # monitor status and fetch on a folder whose state file is a FIFO
    state = tmp_path / "mon"
    fifo(state / "state")
    for argv in (["monitor", "status", "--state-dir", str(state)],
                 ["monitor", "fetch", "--state-dir", str(state), "--results-dir", str(tmp_path / "s")]):
        t0 = time.monotonic()
        assert main(argv) == 2 and time.monotonic() - t0 < 30, argv
        err = capsys.readouterr().err
        assert "not a regular file" in err and len(err.strip().splitlines()) == 1
    # a FIFO where the store writes its result's temporary file: label and runs go on
    store = Store(tmp_path / "store")
    r = import_file(Path(__file__).parents[1] / "golden" / "cyclictest" / "run.json", store)
    fifo(store.run_dir(r.run_id) / ".result.json.tmp")
    t0 = time.monotonic()
    assert main(["label", r.run_id, "relabelled", "--results-dir", str(store.root)]) == 0
    assert main(["runs", "--results-dir", str(store.root)]) == 0 and time.monotonic() - t0 < 30
    capsys.readouterr()
    assert store.load(r.run_id).label == "relabelled"


def test_a_fifo_inventory_is_refused_at_once(tmp_path, capsys):
    import time

    inv = fifo(tmp_path / "hosts")
    t0 = time.monotonic()
    assert main(["fleet", "doctor", str(inv), "--results-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 10 and "not a file or a folder" in err and len(err.strip().splitlines()) == 1


# -- the smaller ones (item 7): one sentence, exit 2, within seconds ------------------------------------------


def test_a_result_of_an_unknown_kind_is_damaged_not_a_traceback(tmp_path, store, capsys):
    from rtforge.results.importers import import_file

    golden = Path(__file__).parents[1] / "golden" / "cyclictest"
    a, b = import_file(golden / "run.json", store), import_file(golden / "hist.txt", store)
    doc = json.loads((store.run_dir(b.run_id) / "result.json").read_text())
    doc["kind"] = "benchmark"
    (store.run_dir(b.run_id) / "result.json").write_text(json.dumps(doc))
    for argv in (["compare", a.run_id, b.run_id], ["report", a.run_id, b.run_id, "-o", str(tmp_path / "r.html")]):
        code, _, err = cli(argv, capsys, store)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "kind" in err


def test_an_empty_results_dir_is_refused_not_the_current_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["runs", "--results-dir", ""], ["runs", "--results-dir="], ["latency", "--results-dir", " "]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--results-dir was given an empty name" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_label_that_is_not_utf8_is_refused(tmp_path, capsys):
    raw = b"stock \xff\xfe".decode("utf-8", "surrogateescape")   # as Python hands such argv bytes over
    assert main(["latency", "--duration", "1s", "--label", raw, "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8" in err and "\\xff\\xfe" in err and not (tmp_path / "runs").exists()


def test_a_hosts_retries_are_checked_up_front(tmp_path, capsys):
    from .test_fleet_cli import nowhere

    inv = tmp_path / "lab.ini"
    inv.write_text(f"[rack]\n{nowhere(1).strip()} rtforge_retries=abc\n")
    assert main(["fleet", "latency", str(inv), "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "rtforge: error: pi-01: rtforge_retries is 'abc': use a number of tries from 0 to 100"
    assert not (tmp_path / "r").exists()


def test_a_csv_of_40000_cpu_columns_is_refused_at_once(tmp_path, capsys):
    import time

    n = 40_000
    f = tmp_path / "wide.csv"
    f.write_text("time," + ",".join(f"core{i}" for i in range(n)) + "\n" +
                 "".join(f"{b}," + ",".join("1" for _ in range(n)) + "\n" for b in range(3)))
    t0 = time.monotonic()
    assert main(["import", str(f), "--results-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 10 and "8,192 counts" in err and len(err.strip().splitlines()) == 1


def test_tune_writes_nothing_outside_its_sysroot(tmp_path, capsys):
    """tune --sysroot followed a link out of the tree: a symlinked
    proc/sys/kernel had the value written where it pointed (here a decoy
    folder; on a real machine its own /proc), a symlinked var/lib/rtforge
    received the state file."""
    from ..support.simboard import copy_tree, remove_tree

    tree = copy_tree("pi3")
    decoy = tmp_path / "decoy"
    try:
        kernel = tree / "proc/sys/kernel"
        shutil.copytree(kernel, decoy / "kernel")
        shutil.rmtree(kernel)
        kernel.symlink_to(decoy / "kernel")
        (decoy / "lib").mkdir()
        state = tree / "var/lib/rtforge"
        state.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(state, ignore_errors=True)
        state.symlink_to(decoy / "lib")
        before = {p: p.read_bytes() for p in decoy.rglob("*") if p.is_file()}
        governor = tree / "sys/devices/system/cpu/cpufreq/policy0/scaling_governor"
        was = governor.read_text()
        code = main(["tune", "--sysroot", str(tree), "--only", "rt-throttling,governor"])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        assert {p: p.read_bytes() for p in decoy.rglob("*") if p.is_file()} == before   # nothing written there
        assert not list((decoy / "lib").iterdir())
        # the state folder that is a link is refused before anything changes, in one sentence
        assert code == 2 and "symbolic link" in err and len(err.strip().splitlines()) == 1, (code, out, err)
        assert governor.read_text() == was
    finally:
        remove_tree(tree)
