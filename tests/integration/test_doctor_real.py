"""doctor on this machine for real (a non-RT VM here): each finding it makes
about the kernel, RT throttling, swap, the governors and the kernel config
agrees with what the machine says when asked directly; a busy thread's CPU
share agrees with the kernel's own accounting of that thread."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtforge.device import LocalTransport
from rtforge.device.doctor.diagnose import diagnose
from rtforge.device.transport.device import Device

# what doctor reads here, test_tune_real changes: make check runs both alone
pytestmark = pytest.mark.machine


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


@pytest.fixture(scope="module")
def report():
    return diagnose(Device(LocalTransport()), window_s=0.5)


def test_the_kernel_as_uname_tells_it(report):
    u = os.uname()
    assert (report.kernel_release, report.kernel_version) == (u.release, u.version)
    is_rt = "PREEMPT_RT" in u.version.split() or _read("/sys/kernel/realtime") == "1"
    assert ("kernel-not-rt" in report.ids()) is (not is_rt)
    if not is_rt:
        f = next(f for f in report.findings if f.id == "kernel-not-rt")
        assert f.severity == "blocks-rt"
        assert f.evidence[0].source == "/proc/sys/kernel/version" and f.evidence[0].value == " ".join(u.version.split())
        assert ("PREEMPT_DYNAMIC" in u.version.split()) is ("preempt=full" in f.fix)


def test_rt_throttling_as_procfs_tells_it(report):
    runtime = int(_read("/proc/sys/kernel/sched_rt_runtime_us"))
    period = int(_read("/proc/sys/kernel/sched_rt_period_us"))
    assert ("rt-throttling" in report.ids()) is (0 <= runtime < period)
    if 0 <= runtime < period:
        f = next(f for f in report.findings if f.id == "rt-throttling")
        assert f"{(period - runtime) / 1000:g} ms of every {period / 1000:g} ms" in f.title


def test_swap_governors_and_config_as_the_machine_tells_them(report):
    swaps = [ln for ln in Path("/proc/swaps").read_text().splitlines()[1:] if ln.strip()]
    assert ("swap" in report.ids()) is bool(swaps)
    slow = [g for g in glob.glob("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor")
            if _read(g) != "performance"]
    assert ("governor" in report.ids()) is bool(slow)
    has_config = os.path.exists("/proc/config.gz") or os.path.exists(f"/boot/config-{os.uname().release}")
    assert ("kernel-config-unknown" in report.ids()) is (not has_config)
    isolated = _read("/sys/devices/system/cpu/isolated") or ""
    assert (report.isolated == []) is (isolated == "")


def _ticks(pid: int) -> int:
    f = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(f[11]) + int(f[12])


def test_a_busy_thread_is_measured_as_the_kernel_counts_it():
    hog = subprocess.Popen([sys.executable, "-c",
                            "import ctypes\nctypes.CDLL(None).prctl(15, b'rtforge-hog', 0, 0, 0)\nwhile True: pass"])
    try:
        deadline = time.monotonic() + 10
        while _read(f"/proc/{hog.pid}/comm") != "rtforge-hog" and time.monotonic() < deadline:
            time.sleep(0.02)
        clk_tck = os.sysconf("SC_CLK_TCK")
        t0, m0 = _ticks(hog.pid), time.monotonic()
        r = diagnose(Device(LocalTransport()), window_s=1.0)
        t1, m1 = _ticks(hog.pid), time.monotonic()
    finally:
        hog.kill()
        hog.wait()
    use = next(t for t in r.threads if t.tid == hog.pid)
    assert (use.comm, use.kind, use.policy) == ("rtforge-hog", "user", "other")
    # doctor's window lies inside [m0, m1]: it cannot have seen more than the
    # kernel counted over the whole span, nor less than that minus what the
    # hog could have used outside the window (one tick of rounding each side,
    # and the hog's stat is read a little after /proc/uptime in each snapshot,
    # later or sooner among hundreds of threads on a busy host: 8 ticks more)
    assert use.ticks <= t1 - t0
    assert use.ticks >= (t1 - t0) - (m1 - m0 - r.window_s) * clk_tck - 10
    assert abs(use.share_pct - 100 * use.ticks / clk_tck / r.window_s) < 0.2
    fires = "busy-thread" in {f.id for f in r.findings if f"pid {hog.pid}" in f.title}
    assert fires is (use.share_pct >= 50)

