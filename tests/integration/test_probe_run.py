"""The probe measuring for real (SCHED_FIFO, a few seconds each).

Independent truths: the raw sample log (--raw) checked with numpy, the
probe's own spike log, and the per-second series.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from rtforge.results.hist import PERCENTILES
from rtforge.results.raw.probe import cpus_from_probe, read_jsonl, read_probe_json

from ..conftest import run_probe
from ..support.procs import probe_measured as measured

pytestmark = pytest.mark.root


def raw_by_cpu(path: Path) -> dict[int, np.ndarray]:
    rows = list(csv.reader(path.open()))[1:]
    out: dict[int, list[int]] = {}
    for cpu, lat in rows:
        out.setdefault(int(cpu), []).append(int(lat))
    return {c: np.asarray(v, dtype=np.int64) for c, v in out.items()}


@pytest.mark.slow
def test_run_matches_raw_samples_spike_log_and_series(probe, tmp_path):
    out, raw = tmp_path / "run", tmp_path / "raw.csv"
    # Spike threshold 1 ns: every wake-up is logged, so the spike log is a
    # second, independent record of every sample.
    r = run_probe(probe, "--out", out, "--interval-us", 500, "--duration-s", 2, "--raw", raw,
                  "--spike-ns", 1, "--checkpoint-s", 1)
    assert r.returncode == 0, r.stderr
    doc = read_probe_json(out)
    assert doc["state"] == "done" and doc["end_reason"] == "duration"
    assert 2.0 <= doc["elapsed_ns"] / 1e9 < 2.5  # 2 s from the first period, plus the start-up (fsyncs, threads)
    samples = raw_by_cpu(raw)
    spikes = np.loadtxt(out / "spikes.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    series = read_jsonl(out / "series.jsonl")
    cpu_ids = doc["config"]["cpus"]
    assert cpu_ids == sorted(os.sched_getaffinity(0))
    for i, c in enumerate(cpus_from_probe(doc)):
        a = np.sort(samples[c.cpu])
        # every wake-up counted once: histogram, raw log, overruns add up to the run
        assert c.count == len(a) == c.hist.total
        assert c.count + c.overruns == pytest.approx(2.0 / 500e-6, abs=3)
        assert (c.min_ns, c.max_ns, c.sum_ns) == (int(a[0]), int(a[-1]), int(a.sum()))
        for name, q in PERCENTILES.items():
            truth = int(a[max(1, -(-q.numerator * len(a) // q.denominator)) - 1])
            got = c.hist.quantile(q, c.min_ns, c.max_ns)
            assert truth <= got <= truth + truth * Fraction(1, 64), name
        mine = spikes[spikes[:, 0] == c.cpu]
        assert c.spikes == len(mine) == int((a > 1).sum()) and c.spikes_dropped == 0
        assert int(mine[:, 2].max()) == c.max_ns
        assert sorted(mine[:, 2].tolist()) == [int(v) for v in a if v > 1]
        assert sum(row["count"][i] for row in series) == c.count
        assert max(row["max_ns"][i] for row in series if row["max_ns"][i] is not None) == c.max_ns
    assert [row["t"] for row in series] == list(range(len(series)))
    tel = read_jsonl(out / "telemetry.jsonl")
    assert 2 <= len(tel) <= 4 and all("load1" in t for t in tel)


def test_sigint_ends_run_cleanly_with_data(probe, tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen([str(probe), "--out", str(out), "--interval-us", "1000", "--duration-s", "60"])
    measured(out)
    p.send_signal(signal.SIGINT)
    assert p.wait(10) == 0
    doc = read_probe_json(out)
    assert doc["state"] == "interrupted" and doc["end_reason"] == "SIGINT"
    ms = doc["elapsed_ns"] / 1e6
    assert 1000 <= ms < 60_000
    for c in doc["cpus"]:
        assert 0 < c["count"] == sum(b[2] for b in c["buckets"])
        # each 1 ms period sampled or missed; the run's wall time also holds
        # its threads' start and the join at the signal (5 ms seen in make check)
        assert ms - 50 <= c["count"] + c["overruns"] <= ms + 1


# A simulation of a slow disk, small and named as such: the first fsync
# takes 600 ms (a busy ext4, an SD card), the rest are the real call.
SLOW_FIRST_FSYNC = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
int fsync(int fd)
{
    static int calls;
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED) == 0) {
        struct timespec ts = { 0, 600 * 1000 * 1000 };
        nanosleep(&ts, 0);
    }
    return real(fd);
}
"""


@pytest.mark.slow
def test_a_slow_first_write_is_not_part_of_the_run(probe, tmp_path):
    """probe.json is written (and fsynced) before the threads start: an
    8 s run once lasted 8.4 s on a loaded CI machine.  The run is what the
    threads measured, from their first period to their last."""
    (tmp_path / "slow.c").write_text(SLOW_FIRST_FSYNC)
    lib = tmp_path / "slow.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "slow.c"), "-ldl"], check=True)
    out = tmp_path / "run"
    r = run_probe(probe, "--out", out, "--interval-us", 1000, "--duration-s", 2,
                  env={**os.environ, "LD_PRELOAD": str(lib)})
    assert r.returncode == 0, r.stderr
    doc = read_probe_json(out)
    assert doc["elapsed_ns"] / 1e9 == pytest.approx(2, abs=0.1)
    assert [c["count"] + c["overruns"] for c in doc["cpus"]] == [2000] * len(doc["cpus"])


@pytest.mark.slow
def test_sigkill_leaves_last_checkpoint(probe, tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen([str(probe), "--out", str(out), "--interval-us", "1000", "--duration-s", "60",
                          "--checkpoint-s", "1"])
    t0 = time.monotonic()
    measured(out, checkpoint=True)
    p.kill()
    p.wait()
    wall_ms = (time.monotonic() - t0) * 1000
    doc = read_probe_json(out)
    assert doc["state"] == "running"  # never finished: a checkpoint
    counts = [c["count"] for c in doc["cpus"]]
    # the 1 s checkpoint at least (its count lags the start-up by a few ms), at most the time it ran
    periods = [c["count"] + c["overruns"] for c in doc["cpus"]]
    assert all(n > 0 for n in counts) and all(900 <= n <= wall_ms for n in periods), (counts, periods, wall_ms)
    assert all(n == sum(b[2] for b in c["buckets"]) for n, c in zip(counts, doc["cpus"]))
    assert len(read_jsonl(out / "series.jsonl")) >= 1


@pytest.mark.slow
def test_whole_missed_periods_are_counted_as_overruns(probe, tmp_path):
    """Stop the probe for 300 ms: each thread misses ~300 periods of 1 ms.
    They are counted once as overruns, not replayed as fake samples."""
    out = tmp_path / "run"
    p = subprocess.Popen([str(probe), "--out", str(out), "--interval-us", "1000", "--duration-s", "3"])
    measured(out)  # 1 s of 3
    p.send_signal(signal.SIGSTOP)
    time.sleep(0.3)
    p.send_signal(signal.SIGCONT)
    assert p.wait(10) == 0
    for c in read_probe_json(out)["cpus"]:
        # >= the 300 stopped periods (minus timing slack); a loaded machine adds its own
        assert 250 <= c["overruns"] <= 1500, c["overruns"]
        assert c["max_ns"] >= 250_000_000  # the wake-up after the stop was that late
        assert c["count"] + c["overruns"] == pytest.approx(3000, abs=3)


def test_loops_limit_and_cpu_choice(probe, tmp_path):
    out = tmp_path / "run"
    r = run_probe(probe, "--out", out, "--interval-us", 200, "--loops", 1234, "--cpus", 0)
    assert r.returncode == 0, r.stderr
    doc = read_probe_json(out)
    assert doc["end_reason"] == "loops"
    assert [(c["cpu"], c["count"]) for c in doc["cpus"]] == [(0, 1234)]  # loops = wake-ups measured


def test_metadata_collected_before_the_run(probe, tmp_path):
    out = tmp_path / "run"
    r = run_probe(probe, "--out", out, "--duration-s", 1)
    assert r.returncode == 0
    meta = read_probe_json(out)["meta"]
    u = os.uname()
    assert meta["uname"]["release"] == u.release and meta["uname"]["version"] == u.version
    assert meta["cmdline"] == Path("/proc/cmdline").read_text().strip()
    assert meta["sched_rt_runtime_us"] == int(Path("/proc/sys/kernel/sched_rt_runtime_us").read_text())
    assert meta["argv"][1:] == ["--out", str(out), "--duration-s", "1"]
    assert meta["cpu_dma_latency_us"] == 0  # held at 0 for the run, read back


def test_privileges_check(probe):
    ok = run_probe(probe, "--check")
    assert ok.returncode == 0 and json.loads(ok.stdout)["sched"] is True
    # root without CAP_SYS_NICE (RLIMIT_RTPRIO is 0): a real refusal
    denied = subprocess.run(["setpriv", "--bounding-set", "-sys_nice", str(probe), "--check"],
                            capture_output=True, text=True)
    assert denied.returncode == 3
    assert "cannot use SCHED_FIFO priority 90: Operation not permitted" in denied.stderr


@pytest.mark.parametrize("args, message", [
    (["--interval-us", "abc"], "--interval-us wants a whole number"),
    (["--cpus", "0-"], "--cpus wants a list"),
    (["--cpus", "4096"], "CPU 4096 is not online"),
    (["--policy", "idle"], "--policy wants fifo or rr"),
    (["--raw", "x.csv"], "--raw needs --loops or --duration-s"),
])
def test_bad_arguments_exit_2(probe, tmp_path, args, message):
    r = run_probe(probe, "--out", tmp_path / "run", *args)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("phase", ["together", "spread"])
def test_phase_decides_when_each_cpu_wakes(probe, tmp_path, phase):
    """spread: CPU i wakes i/n of a period after CPU 0, from a common start;
    together (the default): each thread starts its own period when it starts,
    as cyclictest's do, so the threads' phases differ only by how long
    creating them took.  Every wake-up is logged (spike threshold 1 ns) with
    its expected time, which carries the phase."""
    out = tmp_path / "run"
    args = ["--out", out, "--interval-us", 1000, "--duration-s", 1, "--spike-ns", 1]
    r = run_probe(probe, *args, *(["--phase", phase] if phase == "spread" else []))
    assert r.returncode == 0, r.stderr
    doc = read_probe_json(out)
    assert doc["config"]["phase"] == phase
    spikes = np.loadtxt(out / "spikes.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    cpus = doc["config"]["cpus"]
    phases = {}
    for i, cpu in enumerate(cpus):
        t = spikes[spikes[:, 0] == cpu][:, 1]
        assert len(set((t % 1_000_000).tolist())) == 1  # one fixed phase per thread
        phases[cpu] = int(t[0] % 1_000_000)
        if phase == "spread":
            assert phases[cpu] == 1_000_000 * i // len(cpus)
        else:
            # its first period starts as it starts (after probe.json's fsyncs and
            # the thread's creation: up to a few 100 ms on a busy disk)
            assert 1_000_000 <= int(t[0]) < 1_000_000 + 300_000_000
    if phase == "together" and len(cpus) > 1:
        # created one after another: the later thread's phase lags, by the creation time only
        first = [int(spikes[spikes[:, 0] == cpu][0, 1]) for cpu in cpus]
        assert first == sorted(first) and first[-1] - first[0] < 300_000_000
