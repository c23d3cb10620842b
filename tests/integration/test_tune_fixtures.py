"""rtforge tune on fixture trees of a Pi 3 and a Pi 4 (--sysroot): the plan,
apply, show, revert -- and afterwards every file of the tree is byte for
byte what it was.  The Wi-Fi driver behind `iw` is simulated."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device import LocalTransport
from rtforge.device.doctor.diagnose import diagnose
from rtforge.device.transport.device import Device
from rtforge.device.tune import engine as tuning

from ..support.simboard import copy_tree, remove_tree, sim_tools, tree_digest

STATE = "var/lib/rtforge/tune-state.json"


@pytest.fixture
def pi4(tmp_path, monkeypatch):
    root = copy_tree("pi4")
    env = sim_tools(tmp_path / "sim", wifi={"wlan0": "on"})
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield root, Path(env["RTFORGE_SIM_IW"]) / "wlan0"
    remove_tree(root)


@pytest.fixture
def pi3():
    root = copy_tree("pi3")
    yield root
    remove_tree(root)


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text()


@pytest.mark.slow
def test_apply_show_doctor_revert_on_a_pi4(pi4, capsys):
    root, wifi = pi4
    before = tree_digest(root)
    board = Device(LocalTransport(), root=str(root))
    findings = set(diagnose(board, window_s=0).ids())
    assert {"governor", "rt-throttling", "wifi-power-save"} <= findings

    assert main(["tune", "--sysroot", str(root)]) == 0
    out = capsys.readouterr().out
    assert "applied 3 of 3" in out and "--revert" in out
    assert read(root, "sys/devices/system/cpu/cpufreq/policy0/scaling_governor") == "performance\n"
    assert read(root, "proc/sys/kernel/sched_rt_runtime_us") == "-1\n"
    assert wifi.read_text() == "off\n"
    state = json.loads(read(root, STATE))
    saved = {s["target"]: (s["before"], s["applied"]) for s in state["settings"]}
    assert saved == {"/sys/devices/system/cpu/cpufreq/policy0/scaling_governor": ("ondemand", "performance"),
                     "/proc/sys/kernel/sched_rt_runtime_us": ("950000", "-1"), "wlan0": ("on", "off")}
    assert state["boot_id"] == read(root, "proc/sys/kernel/random/boot_id").strip()

    report = diagnose(board, window_s=0)
    assert not {"governor", "rt-throttling", "wifi-power-save"} & set(report.ids())
    assert {x.id for x in report.fixed} == {"governor", "rt-throttling", "wifi-power-save"}
    assert "sched_rt_runtime_us: 950000 -> -1" in next(x for x in report.fixed if x.id == "rt-throttling").settings

    assert main(["tune", "--sysroot", str(root), "--show"]) == 0
    out = capsys.readouterr().out
    assert out.count("applied  ") == 3 and "policy0 (CPU 0-3): ondemand -> performance" in out

    # someone changes a setting behind tune's back: show and doctor say so
    (root / "sys/devices/system/cpu/cpufreq/policy0/scaling_governor").write_text("schedutil\n")
    assert main(["tune", "--sysroot", str(root), "--show"]) == 0
    assert "changed since" in capsys.readouterr().out
    gov = next(f for f in diagnose(board, window_s=0).findings if f.id == "governor")
    assert "but this still fires" in gov.evidence[-1].value

    assert main(["tune", "--sysroot", str(root), "--revert"]) == 0
    assert "restored 3 settings" in capsys.readouterr().out
    assert tree_digest(root) == before and not (root / STATE).exists()
    assert wifi.read_text() == "on\n"
    assert main(["tune", "--sysroot", str(root), "--revert"]) == 0
    assert "nothing to revert" in capsys.readouterr().out


def test_isolate_moves_irqs_but_not_per_cpu_ones_and_back(pi3, capsys):
    before = tree_digest(pi3)
    assert main(["tune", "--sysroot", str(pi3), "--isolate", "3", "--only", "irq-affinity"]) == 0
    out = capsys.readouterr().out
    assert "IRQ 16, 17, 21: per-CPU interrupts" in out
    for n in (23, 24, 46, 48, 50, 51, 54, 59, 62, 79, 80, 86, 87, 92):
        assert read(pi3, f"proc/irq/{n}/smp_affinity_list") == "0-2\n", n
    for n in (16, 17, 21):
        assert read(pi3, f"proc/irq/{n}/smp_affinity_list") == "0-3\n", n
    assert read(pi3, "proc/irq/default_smp_affinity") == "7\n"
    assert read(pi3, "proc/sys/kernel/sched_rt_runtime_us") == "950000\n"       # --only
    assert json.loads(read(pi3, STATE))["isolate"] == [3]
    report = diagnose(Device(LocalTransport(), root=str(pi3)), window_s=0)
    assert "irq-on-isolated" not in report.ids() and [x.id for x in report.fixed] == ["irq-on-isolated"]
    assert main(["tune", "--sysroot", str(pi3), "--revert"]) == 0
    assert tree_digest(pi3) == before


def test_dry_run_changes_nothing(pi3, capsys):
    before = tree_digest(pi3)
    assert main(["tune", "--sysroot", str(pi3), "--isolate", "2-3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "IRQ 62 dwc_otg, dwc_otg_pcd, dwc_otg_hcd:usb1: 0-3 -> 0-1" in out
    assert "sched_rt_runtime_us: 950000 -> -1" in out and "would change" in out
    assert tree_digest(pi3) == before and not (pi3 / STATE).exists()


@pytest.mark.root   # mount --bind
def test_a_refused_write_is_reported_and_not_saved(pi3, capsys):
    """The kernel refuses some writes (a managed or per-CPU interrupt: EIO).
    Here IRQ 62's file is this machine's read-only /sys/devices/system/cpu/online,
    bound onto it (a bind mount, not a link: a link out of the tree is never
    followed; it reads "0-1", and the kernel refuses to open it for writing,
    root or not): the rest is applied, the refused one is named and left out
    of the state, and revert restores the rest."""
    online = Path("/sys/devices/system/cpu/online").read_text().strip()
    assert online.startswith("0-"), f"needs a machine with 2 CPUs or more, online: {online}"
    target = pi3 / "proc/irq/62/smp_affinity_list"
    subprocess.run(["mount", "--bind", "/sys/devices/system/cpu/online", str(target)], check=True)
    try:
        before = tree_digest(pi3)
        assert main(["tune", "--sysroot", str(pi3), "--isolate", "1"]) == 1   # the boot words could not be put in place
        out = capsys.readouterr().out
        assert "not changed: IRQ 62 dwc_otg" in out and "Permission denied" in out
        saved = {s["target"] for s in json.loads(read(pi3, STATE))["settings"]}
        assert "/proc/irq/62/smp_affinity_list" not in saved and "/proc/irq/92/smp_affinity_list" in saved
        assert main(["tune", "--sysroot", str(pi3), "--revert"]) == 0
        assert tree_digest(pi3) == before
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_the_first_before_value_wins(pi3):
    board = Device(LocalTransport(), root=str(pi3))
    tuning.apply(board, tuning.plan(board, only=["rt-throttling"]))
    (pi3 / "proc/sys/kernel/sched_rt_runtime_us").write_text("900000\n")      # changed by someone since
    tuning.apply(board, tuning.plan(board, only=["rt-throttling"]))
    assert read(pi3, "proc/sys/kernel/sched_rt_runtime_us") == "-1\n"
    tuning.revert(board)
    assert read(pi3, "proc/sys/kernel/sched_rt_runtime_us") == "950000\n"


def test_a_state_from_an_earlier_boot_is_not_written_back(pi3, capsys):
    board = Device(LocalTransport(), root=str(pi3))
    tuning.apply(board, tuning.plan(board, only=["rt-throttling"]))
    (pi3 / "proc/sys/kernel/random/boot_id").write_text("11111111-2222-3333-4444-555555555555\n")   # rebooted
    (pi3 / "proc/sys/kernel/sched_rt_runtime_us").write_text("950000\n")                            # the boot default
    assert main(["tune", "--sysroot", str(pi3), "--show"]) == 0
    assert "rebooted since" in capsys.readouterr().out
    assert diagnose(board, window_s=0).fixed == []
    result = tuning.revert(board)
    assert result.rebooted and not (pi3 / STATE).exists()
    assert read(pi3, "proc/sys/kernel/sched_rt_runtime_us") == "950000\n"


def test_hostile_cpu_lists_on_the_target_are_named_not_a_crash(pi3, capsys):
    """Issue 22 item 3: a target whose /proc/cmdline holds isolcpus=0-99999999999
    ended tune in a MemoryError.  Each list that is none is named with its
    file; the interrupt it describes is left as it is."""
    (pi3 / "proc/cmdline").write_text("console=tty1 isolcpus=0-99999999999\n")
    (pi3 / "proc/irq/62/smp_affinity_list").write_text("0-99999999999\n")
    (pi3 / "sys/devices/system/cpu/isolated").write_text("\n")
    before = tree_digest(pi3)
    assert main(["tune", "--sysroot", str(pi3), "--only", "irq-affinity", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "/proc/cmdline: isolcpus=0-99999999999 is not a CPU list the kernel reads (CPU 99999999999 is " \
           "beyond 8191" in out
    assert "no CPUs to keep free of interrupts" in out
    assert main(["tune", "--sysroot", str(pi3), "--isolate", "3", "--only", "irq-affinity", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "/proc/irq/62/smp_affinity_list: 0-99999999999 is not a CPU list the kernel reads" in out
    assert "IRQ 92 mmc1: 0-3 -> 0-2" in out and "IRQ 62 dwc_otg" not in out
    assert tree_digest(pi3) == before


@pytest.mark.parametrize("argv, message", [
    (["--isolate", "0-3"], "would isolate every CPU"),
    (["--isolate", "7"], "names CPU 7, which this target does not have (online: 0-3)"),
    (["--isolate", "a-b"], "--isolate a-b"),
    # issue 22 item 3: expanding this range took 4.5 GB and ended in a MemoryError
    (["--isolate", "0-99999999999"], "names CPU 4-99999999999, which this target does not have (online: 0-3)"),
    (["--only", "governor,turbo"], "--only turbo: no such operation"),
    (["--show", "--revert"], "--show and --revert exclude each other"),
    (["--revert", "--isolate", "3"], "--revert takes no --isolate or --only"),
])
def test_bad_input_is_refused_before_anything_changes(pi3, argv, message, capsys):
    before = tree_digest(pi3)
    assert main(["tune", "--sysroot", str(pi3), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert tree_digest(pi3) == before
