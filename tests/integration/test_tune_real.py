"""rtforge tune on this machine for real: real IRQs in /proc/irq moved off a
CPU and back, RT throttling off and back, and afterwards every value
exactly as it was.  Other tests measure latency on this machine at the same
time, so a guard restores the values from before even when a test fails."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.cpulist import parse_cpulist
from rtforge.device import LocalTransport
from rtforge.device.doctor.diagnose import diagnose
from rtforge.device.state.tunestate import STATE_PATH
from rtforge.device.transport.device import Device
from rtforge.device.tune import engine as tuning
from rtforge.units import plural

# this machine's tuning is changed here (and read by test_doctor_real):
# make check runs these alone, after the tests it runs side by side
pytestmark = [pytest.mark.root, pytest.mark.machine]

RUNTIME = "/proc/sys/kernel/sched_rt_runtime_us"


def settings_now() -> dict[str, str]:
    """Everything tune may touch here, read directly from the kernel."""
    paths = glob.glob("/proc/irq/*/smp_affinity_list") + ["/proc/irq/default_smp_affinity", RUNTIME]
    out = {}
    for p in paths:
        try:
            out[p] = Path(p).read_text().strip()
        except OSError:
            pass
    return out


@pytest.fixture
def before():
    if os.path.exists(STATE_PATH):
        pytest.skip(f"{STATE_PATH} exists: a real tune is applied on this machine; not touching it")
    saved = settings_now()
    had_dir = os.path.isdir(os.path.dirname(STATE_PATH))
    yield saved
    for path, value in saved.items():        # whatever a failed test left behind
        try:
            if Path(path).read_text().strip() != value:
                Path(path).write_text(value + "\n")
        except OSError:
            pass
    Path(STATE_PATH).unlink(missing_ok=True)
    if not had_dir and os.path.isdir(os.path.dirname(STATE_PATH)):
        os.rmdir(os.path.dirname(STATE_PATH))      # tune made it; nothing else may be in it


def rt_cpu() -> int:
    return max(parse_cpulist(Path("/sys/devices/system/cpu/online").read_text()))


def test_isolate_and_rt_throttling_then_revert_exactly(before, capsys):
    cpu = rt_cpu()
    assert main(["tune", "--isolate", str(cpu), "--only", "irq-affinity,rt-throttling"]) == 0
    out = capsys.readouterr().out
    now = settings_now()
    state = json.loads(Path(STATE_PATH).read_text())
    saved = {s["target"]: s for s in state["settings"]}
    assert state["isolate"] == [cpu]
    assert state["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert now[RUNTIME] == "-1" and saved[RUNTIME]["before"] == before[RUNTIME]
    moved = [p for p in saved if p.endswith("/smp_affinity_list")]
    assert moved, f"no IRQ of this machine could be moved off CPU {cpu}: {out}"
    for p in moved:
        assert saved[p]["before"] == before[p]                       # the value from before, exactly
        assert now[p] == saved[p]["applied"] and cpu not in parse_cpulist(now[p])
    # IRQs on the CPU that were left alone: the kernel refused them (managed
    # interrupts of multi-queue devices do), and the output says so
    refused = [p for p, v in before.items()
               if p.endswith("/smp_affinity_list") and p not in saved and cpu in parse_cpulist(v)]
    for p in refused:
        assert f"({p})" in out and now[p] == before[p]
        assert f"not changed: IRQ {p.split('/')[3]} " in out

    report = diagnose(Device(LocalTransport()), window_s=0)
    assert report.isolated == [cpu]
    assert "rt-throttling" in {x.id for x in report.fixed} and "rt-throttling" not in report.ids()
    if refused:       # doctor still names them, and says that tune could not move them
        f = next(f for f in report.findings if f.id == "irq-on-isolated")
        assert {e.source for e in f.evidence if e.source.startswith("/proc/irq/")} == set(refused)
        assert "but this still fires" in f.evidence[-1].value
    else:
        assert "irq-on-isolated" in {x.id for x in report.fixed} and "irq-on-isolated" not in report.ids()

    assert main(["tune", "--show"]) == 0
    assert capsys.readouterr().out.count("applied  ") == len(saved)
    assert main(["tune", "--revert"]) == 0
    assert f"restored {plural(len(saved), 'setting')}" in capsys.readouterr().out
    after = settings_now()
    assert {p: after.get(p) for p in before} == before
    assert not os.path.exists(STATE_PATH)


def test_first_before_value_wins_for_real(before):
    board = Device(LocalTransport())
    tuning.apply(board, tuning.plan(board, only=["rt-throttling"]))
    Path(RUNTIME).write_text("960000\n")        # someone changed it since (this kernel refuses < 950000)
    tuning.apply(board, tuning.plan(board, only=["rt-throttling"]))
    assert Path(RUNTIME).read_text().strip() == "-1"
    tuning.revert(board)
    assert Path(RUNTIME).read_text().strip() == before[RUNTIME]


def test_dry_run_touches_nothing(before, capsys):
    assert main(["tune", "--isolate", str(rt_cpu()), "--dry-run"]) == 0
    assert "would change" in capsys.readouterr().out
    assert settings_now() == before and not os.path.exists(STATE_PATH)
