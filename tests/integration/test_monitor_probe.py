"""The probe's soak mode for real (SCHED_FIFO, 1 s windows, a few seconds
each): windows that add up and line up with the wall clock, hours and days
that are the windows rolled up (checked against Python's own rollup),
Prometheus's textfile checked by promtool and against the windows, gaps,
reboots and kernel changes between lives, alerts with their spikes, and a
folder that stays within its bounds and follows no link."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rtforge.results.soak.windows import (
    bucket_hi,
    bucket_index,
    bucket_lo,
    read_events,
    read_rollups,
    read_windows,
    roll,
)

from ..support.procs import holds

pytestmark = pytest.mark.root

S = 1_000_000_000
SYSROOT = Path(__file__).parents[1] / "fixtures" / "sysroot" / "pi4"


def soak(probe: Path, state: Path, *args, seconds: int = 3, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(probe), "--soak", "--state", str(state), "--window-s", "1", "--duration-s",
                           str(seconds), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def prom_samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:  # not a skip: make setup installs it
        pytest.fail("the monitor's metrics are checked with Debian's promtool: apt-get install prometheus")
    return path


@pytest.mark.slow
def test_windows_add_up_and_line_up_with_the_wall_clock(probe, tmp_path):
    state, prom = tmp_path / "mon", tmp_path / "prom"
    prom.mkdir()
    r = soak(probe, state, "--textfile-dir", prom, seconds=4)
    assert r.returncode == 0, r.stderr
    ws = read_windows(state)
    cpus = sorted(os.sched_getaffinity(0))
    assert len(ws) >= 4 and all([c.cpu for c in w.cpus] == cpus for w in ws)
    assert ws[0].partial and ws[-1].partial and not any(w.partial for w in ws[1:-1])
    for a, b in zip(ws, ws[1:]):
        assert a.end_ns == b.start_ns  # nothing between windows, nothing twice
    for w in ws[1:-1]:  # whole windows fall on whole seconds of the wall clock
        assert w.start_ns % S == 0 and w.end_ns - w.start_ns == S
    for i in range(len(cpus)):  # every wake-up of each thread's 4 s, once
        assert sum(w.cpus[i].count + w.cpus[i].overruns for w in ws) == pytest.approx(4 / 1e-3, abs=3)
    # the probe's hours and days are Python's rollup of its windows
    for kind in ("hour", "day"):
        mine, theirs = roll(ws, kind), read_rollups(state, kind)
        assert [(x.key, x.windows, [(c.count, c.max_ns, c.sum_ns, c.buckets) for c in x.cpus]) for x in mine] == \
               [(x.key, x.windows, [(c.count, c.max_ns, c.sum_ns, c.buckets) for c in x.cpus]) for x in theirs]
    assert [e["event"] for e in read_events(state)] == ["start", "stop"]
    assert "running 0" in (state / "state").read_text()

    # Prometheus: the same wake-ups, counted exactly at its bounds
    assert sorted(p.name for p in prom.iterdir()) == ["rtforge.prom"]  # the temp file was renamed
    text = (prom / "rtforge.prom").read_text()
    check = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    m = prom_samples(text)
    for i, cpu in enumerate(cpus):
        count = sum(w.cpus[i].count for w in ws)
        assert m[f'rtforge_latency_seconds_count{{cpu="{cpu}"}}'] == count == m[f'rtforge_samples_total{{cpu="{cpu}"}}']
        assert m[f'rtforge_latency_seconds_bucket{{cpu="{cpu}",le="+Inf"}}'] == count
        assert m[f'rtforge_latency_seconds_sum{{cpu="{cpu}"}}'] == pytest.approx(sum(w.cpus[i].sum_ns for w in ws) / S)
        # a CPU with no wake-up in the last (partial) window has no gauge
        last_max = ws[-1].cpus[i].max_ns
        assert m.get(f'rtforge_window_max_latency_seconds{{cpu="{cpu}"}}') == (last_max and last_max / S)
        buckets: dict[int, int] = {}
        for w in ws:
            for b, n in w.cpus[i].buckets.items():
                buckets[b] = buckets.get(b, 0) + n
        for le_s in ("0.00001", "0.00005", "0.0001", "0.001"):
            le = round(float(le_s) * S)
            got = m[f'rtforge_latency_seconds_bucket{{cpu="{cpu}",le="{le_s}"}}']
            surely = sum(n for b, n in buckets.items() if bucket_hi(b) <= le)
            maybe = sum(n for b, n in buckets.items() if bucket_lo(b) <= le)
            assert surely <= got <= maybe
    assert m["rtforge_windows_total"] == len(ws)
    assert m["rtforge_window_end_timestamp_seconds"] == ws[-1].end_ns / S
    # the monitor stopped: its last file says so (the figures are its last, not live ones)
    assert m["rtforge_monitor_up"] == 0


def test_probe_and_python_agree_on_the_buckets(probe):
    values = [0, 1, 127, 128, 129, 255, 256, 1000, 4095, 65_537, 10**6, 10**9 + 7, 2**40 + 3, 2**63 - 1]
    r = subprocess.run([str(probe), "--hist-stdin"], input="\n".join(map(str, values)), capture_output=True,
                       text=True, check=True)
    theirs = [(lo, hi) for lo, hi, _ in json.loads(r.stdout)["buckets"]]
    assert theirs == sorted({(bucket_lo(bucket_index(v)), bucket_hi(bucket_index(v))) for v in values})


def _set_state(state: Path, **values) -> None:
    lines = dict(line.split(" ", 1) for line in (state / "state").read_text().splitlines())
    lines.update({k: str(v) for k, v in values.items()})
    (state / "state").write_text("".join(f"{k} {v}\n" for k, v in lines.items()))


@pytest.mark.slow
def test_a_restart_is_a_gap_and_a_new_kernel_an_event(probe, tmp_path):
    state = tmp_path / "mon"
    assert soak(probe, state, seconds=2).returncode == 0
    # The life before ran another kernel, in another boot (as a board that
    # was updated and rebooted leaves its state file)
    _set_state(state, release="5.10.0-old", version="#1 SMP PREEMPT old", boot_id="0ld-b00t")
    time.sleep(1)
    assert soak(probe, state, seconds=2).returncode == 0
    ev = read_events(state)
    assert [e["event"] for e in ev] == ["start", "stop", "gap", "kernel", "start", "stop"]
    gap, kernel = ev[2], ev[3]
    assert gap["reboot"] is True and gap["clean"] is True and gap["boot_id_before"] == "0ld-b00t"
    assert 1.0 <= gap["seconds"] < 5 and gap["seconds"] == pytest.approx((gap["to_ns"] - gap["from_ns"]) / S, abs=1e-3)
    assert gap["from_ns"] == max(w.end_ns for w in read_windows(state) if w.life == gap["life_before"])
    assert kernel["from"] == {"release": "5.10.0-old", "version": "#1 SMP PREEMPT old"}
    assert kernel["to"]["release"] == os.uname().release
    lives = {w.life for w in read_windows(state)}
    assert len(lives) == 2


@pytest.mark.slow
def test_a_killed_monitor_is_an_unclean_gap_and_its_hour_is_not_lost(probe, tmp_path):
    state = tmp_path / "mon"
    p = subprocess.Popen([str(probe), "--soak", "--state", str(state), "--window-s", "1"], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while len(read_windows(state)) < 2:  # two windows filed, the hour in progress pending
        assert time.monotonic() < deadline, "the monitor filed no two windows in 30 s"
        time.sleep(0.1)
    # killed at any point of a window (each point: test_monitor_crash.py)
    p.send_signal(signal.SIGKILL)  # no stop recorded, the hour in progress only in pending.jsonl
    p.wait()
    killed = read_windows(state)
    assert len(killed) >= 2 and (state / "pending.jsonl").exists()
    assert soak(probe, state, seconds=2).returncode == 0
    ev = read_events(state)
    gap = next(e for e in ev if e["event"] == "gap")
    assert gap["clean"] is False and gap["reboot"] is False
    # the killed life's hour was filed at the next start: it holds exactly its windows
    life = killed[0].life
    hours = [h for h in read_rollups(state, "hour", merged=False) if h.lives == [life]]
    assert sum(h.windows for h in hours) == len(killed)
    assert sum(h.cpus[0].count for h in hours) == sum(w.cpus[0].count for w in killed)


@pytest.mark.slow
def test_one_monitor_per_folder(probe, tmp_path):
    state = tmp_path / "mon"
    first = subprocess.Popen([str(probe), "--soak", "--state", str(state), "--window-s", "1", "--duration-s", "8"])
    try:
        holds(state / "lock", first.pid)
        r = soak(probe, state, seconds=1)
        assert r.returncode == 4
        assert r.stderr.strip() == f"rtprobe: another monitor (pid {first.pid}) is writing {state}"
    finally:
        first.wait(30)
    assert first.returncode == 0


@pytest.mark.slow
def test_an_alert_keeps_the_windows_worst_spikes(probe, tmp_path):
    state = tmp_path / "mon"
    assert soak(probe, state, "--alert-us", 1, seconds=3).returncode == 0
    # a window with no wake-up (the first, when the clock's second turns a few ms
    # after the start) has no max to cross the threshold
    ws = [w for w in read_windows(state) if w.count]
    assert len(ws) >= 2 and all(w.alert is not None for w in ws)
    for w in ws:
        assert w.alert["max_ns"] == w.max_ns and w.alert["timerlat"] == "off"
        rows = (state / w.alert["evidence"] / "spikes.csv").read_text().splitlines()
        assert rows[0] == "cpu,time_ns,lat_ns" and 1 < len(rows) <= 21
        cpu, t, lat = map(int, rows[1].split(","))
        assert lat == w.max_ns  # the worst first: the wake-up that made the window's max
        assert w.start_ns <= t <= w.end_ns + S // 10
    assert sum(e["event"] == "alert" for e in read_events(state)) == len(ws)


@pytest.mark.slow
def test_storage_keeps_within_its_age_and_size(probe, tmp_path):
    state = tmp_path / "mon"
    (state / "windows").mkdir(parents=True)
    (state / "evidence" / "2001-01-01T000000Z").mkdir(parents=True)
    (state / "evidence" / "2001-01-01T000000Z" / "spikes.csv").write_text("cpu,time_ns,lat_ns\n")
    (state / "windows" / "2001-01-01.jsonl").write_text("{}\n")             # older than --keep-days
    recent = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")
    (state / "windows" / f"{recent}.jsonl").write_bytes(b"x" * (2 << 20))  # young, but over the 1 MiB cap
    (state / "windows" / "notes.txt").write_text("mine\n")                  # not the monitor's: never removed
    assert soak(probe, state, "--max-mb", 1, "--keep-days", 7, seconds=2).returncode == 0
    rotated = {e["removed"]: e["why"] for e in read_events(state) if e["event"] == "rotated"}
    assert rotated["windows/2001-01-01.jsonl"] == "age"
    assert rotated["evidence/2001-01-01T000000Z"] == "age"
    assert rotated[f"windows/{recent}.jsonl"] == "cap"
    assert (state / "windows" / "notes.txt").exists() and read_windows(state)
    used = sum(p.stat().st_size for p in state.rglob("*") if p.is_file())
    assert used < 1 << 20


@pytest.mark.slow
def test_a_link_in_the_folder_is_not_written_through(probe, tmp_path):
    state, outside = tmp_path / "mon", tmp_path / "outside.jsonl"
    outside.write_text("precious\n")
    (state / "windows").mkdir(parents=True)
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    os.symlink(outside, state / "windows" / f"{today}.jsonl")
    r = soak(probe, state, seconds=2)
    assert outside.read_text() == "precious\n"
    assert "cannot append" in r.stderr


@pytest.mark.slow
def test_a_pi_telemetry_reaches_the_window_and_prometheus(probe, tmp_path):
    state, prom = tmp_path / "mon", tmp_path / "prom"
    prom.mkdir()
    r = soak(probe, state, "--textfile-dir", prom, "--sysroot", SYSROOT, seconds=2)
    assert r.returncode == 0, r.stderr
    w = read_windows(state)[1]
    assert w.tel["temp_max_mc"] == [81479] and w.tel["throttled"] == 0x50005
    m = prom_samples((prom / "rtforge.prom").read_text())
    assert m['rtforge_temperature_celsius{zone="0",type="cpu-thermal"}'] == pytest.approx(81.479)
    assert m['rtforge_throttled{flag="under_voltage"}'] == 1 and m['rtforge_throttled{flag="throttled"}'] == 1
    assert m['rtforge_throttled{flag="arm_freq_capped"}'] == 0



@pytest.mark.slow
def test_windows_without_a_reading_keep_the_last_gauges(probe, tmp_path):
    """Sensors read once (at the start, --telemetry-s 60): the windows after it
    have no reading, and Prometheus still shows the last one rather than losing
    the gauge -- as it did when the last window, cut by the stop a few ms into
    its second, was too short to read the sensors (seen in CI)."""
    state, prom = tmp_path / "mon", tmp_path / "prom"
    prom.mkdir()
    r = soak(probe, state, "--textfile-dir", prom, "--sysroot", SYSROOT, "--telemetry-s", 60, seconds=2)
    assert r.returncode == 0, r.stderr
    read = [w.tel["samples"] for w in read_windows(state)]
    assert sum(read) == 1 and read[-1] == 0, read
    m = prom_samples((prom / "rtforge.prom").read_text())
    assert m['rtforge_temperature_celsius{zone="0",type="cpu-thermal"}'] == pytest.approx(81.479)
    assert m['rtforge_throttled{flag="under_voltage"}'] == 1

def _pi_cpus() -> list[tuple[str, str]]:
    from rtforge.kernel.boards import load_boards
    return sorted({(b.uname_m[0], cpu) for b in load_boards().values() if b.models for cpu in b.user_cpus})


@pytest.mark.parametrize("machine, cpu", _pi_cpus(), ids=[f"{m}-{c}" for m, c in _pi_cpus()])
@pytest.mark.slow
def test_soak_mode_runs_on_each_pi_cpu(machine, cpu, tmp_path):
    """The static probe a board gets, under qemu-user as that Pi's CPU: its
    64-bit window counters (LDREXD/STREXD on the ARMv6K of a Pi 1) and the
    rest of soak mode work there, with a Pi's telemetry and the textfile."""
    from rtforge.measure.probebuild import build_probe

    from ..support.qemu_user import qemu_user

    state, prom = tmp_path / "mon", tmp_path / "prom"
    prom.mkdir()
    p = subprocess.run([str(qemu_user(machine)), "-cpu", cpu, str(build_probe(machine, static=True)), "--soak",
                        "--state", str(state), "--window-s", "1", "--duration-s", "3", "--sysroot", str(SYSROOT),
                        "--textfile-dir", str(prom)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    ws = read_windows(state)
    # 3 s in 1 s windows: at least two whole ones even when the machine is busy
    assert len(ws) >= 2 and sum(c.count for w in ws for c in w.cpus) > 100, ws  # ~1000 wake-ups a second, emulated
    # telemetry is sampled every --telemetry-s, not per window: a last partial window cut
    # short on a loaded machine may hold no sample (seen: [None]); every window that does reads it
    sampled = [w.tel["temp_max_mc"] for w in ws if w.tel.get("samples")]
    assert sampled and all(t == [81479] for t in sampled), [w.tel for w in ws]
    assert [e["event"] for e in read_events(state)] == ["start", "stop"]
    assert "rtforge_latency_seconds_bucket" in (prom / "rtforge.prom").read_text()
