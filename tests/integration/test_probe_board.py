"""The probe on a Raspberry Pi, as far as that exists here: its /sys and
/proc as a fixture tree (--sysroot; a simulation of the firmware's files,
kept to what the probe reads), and its ARM builds under qemu-user."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtforge.results.model import RunResult
from rtforge.results.raw.finalize import finalize
from rtforge.results.raw.probe import read_jsonl, read_probe_json
from rtforge.results.stats import telemetry_summary

from ..conftest import run_probe

pytestmark = pytest.mark.root


def pi4_sysroot(root: Path, temp_mc: int = 81_500, throttled: str = "50005") -> Path:
    """What a Pi 4 running Raspberry Pi OS exposes, for the files the probe reads."""
    files = {
        "proc/device-tree/model": "Raspberry Pi 4 Model B Rev 1.4\0",
        "proc/cpuinfo": "processor\t: 0\nBogoMIPS\t: 108.00\nCPU part\t: 0xd08\n\n"
                        "Hardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n",
        "proc/cmdline": "console=serial0,115200 root=PARTUUID=1234-02 rootwait isolcpus=3",
        "proc/loadavg": "1.50 0.80 0.40 2/150 4242\n",
        "proc/sys/kernel/sched_rt_runtime_us": "950000\n",
        "sys/kernel/realtime": "1\n",
        "sys/class/thermal/thermal_zone0/temp": f"{temp_mc}\n",
        "sys/class/thermal/thermal_zone0/type": "cpu-thermal\n",
        "sys/devices/platform/soc/soc:firmware/get_throttled": throttled + "\n",
        "sys/devices/system/cpu/possible": "0-3\n",
        "sys/devices/system/cpu/online": "0-3\n",
        "sys/devices/system/cpu/isolated": "3\n",
    }
    for cpu in range(4):
        base = f"sys/devices/system/cpu/cpu{cpu}/cpufreq/"
        files[base + "scaling_governor"] = "ondemand\n"
        files[base + "scaling_cur_freq"] = "600000\n"
        files[base + "cpuinfo_min_freq"] = "600000\n"
        files[base + "cpuinfo_max_freq"] = "1500000\n"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


@pytest.mark.slow
def test_pi_metadata_and_telemetry_from_fixture_tree(probe, tmp_path):
    sysroot = pi4_sysroot(tmp_path / "pi4")
    out = tmp_path / "run"
    r = run_probe(probe, "--out", out, "--duration-s", 2, "--interval-us", 1000, "--sysroot", sysroot)
    assert r.returncode == 0, r.stderr
    doc = read_probe_json(out)
    meta = doc["meta"]
    assert meta["board_model"] == "Raspberry Pi 4 Model B Rev 1.4"  # NUL terminator stripped
    assert meta["cpu_part"] == "0xd08" and meta["hardware"] == "BCM2835"
    assert meta["realtime"] == 1 and meta["isolated_cpus"] == "3"
    assert [c["governor"] for c in meta["cpufreq"]] == ["ondemand"] * 4
    assert meta["thermal_zones"] == [{"zone": 0, "type": "cpu-thermal"}]
    assert meta["throttled_hex"] == "50005"
    tel = read_jsonl(out / "telemetry.jsonl")
    assert len(tel) >= 2
    assert all(t["temp_mc"] == [81500] and t["freq_khz"] == [600000] * 4 for t in tel)
    assert all(t["throttled"] == 0x50005 and t["load1"] == 1.5 for t in tel)

    # What rtforge makes of it: every warning names the fix.
    result = RunResult(run_id="x", engine="probe", state="running", host="pi", start_time="2026-01-01T00:00:00+00:00")
    (tmp_path / "run-dir").mkdir()
    out.rename(tmp_path / "run-dir" / "raw")   # a run folder holds its raw/ (a link there would be refused)
    finalize(result, tmp_path / "run-dir")
    assert result.state == "complete" and result.system["preempt_model"] == "rt"
    summary = telemetry_summary(result.telemetry)
    assert summary["throttled_seen"] is True
    assert summary["throttle_flags"] == ["under-voltage", "throttled"]
    assert summary["temp_max_mc"] == 81500
    text = "\n".join(result.warnings)
    assert "ondemand" in text and "performance" in text
    assert "under-voltage, throttled" in text and "power supply" in text
    assert "81.5 °C" in text and "heatsink" in text


@pytest.mark.slow
def test_telemetry_follows_changes_during_the_run(probe, tmp_path):
    """The probe re-reads sysfs every second (pread at offset 0)."""
    import subprocess
    import time

    sysroot = pi4_sysroot(tmp_path / "pi4", temp_mc=50_000, throttled="0")
    out = tmp_path / "run"
    p = subprocess.Popen([str(probe), "--out", str(out), "--duration-s", "3", "--interval-us", "1000",
                          "--sysroot", str(sysroot)])
    time.sleep(1.5)
    # write in place (same inode), as sysfs attributes change
    with open(sysroot / "sys/class/thermal/thermal_zone0/temp", "r+") as f:
        f.write("83000\n")
    with open(sysroot / "sys/devices/platform/soc/soc:firmware/get_throttled", "r+") as f:
        f.write("a\n")  # frequency capped + soft temperature limit
    assert p.wait(10) == 0
    temps = [t["temp_mc"][0] for t in read_jsonl(out / "telemetry.jsonl")]
    assert temps[0] == 50000 and temps[-1] == 83000
    summary = telemetry_summary({"temp_mc": {"zone0": temps},
                                 "throttled": [t["throttled"] for t in read_jsonl(out / "telemetry.jsonl")]})
    assert summary["throttle_flags"] == ["ARM frequency capped", "soft temperature limit"]
