"""The boot-time part of `rtforge tune --isolate`: the command line words
tried once on the simulated Pi 4 of the deploy tests (tests/support/simpi.py:
its firmware passes the cmdline file it resolves to /proc/cmdline; rtforge
reaches the board over the real loopback sshd), and the GRUB drop-in read
back by a real shell."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from rtforge.cli import main
from rtforge.device import LocalTransport, SshTransport
from rtforge.device.deploy.grubcmdline import DROPIN, dropin_text
from rtforge.device.state.tunestate import STATE_PATH
from rtforge.device.transport.device import Device
from rtforge.device.tune import engine as tuning
from rtforge.errors import UserError

from ..support.simboard import copy_tree, remove_tree, tree_digest
from ..support.simpi import CMDLINE, OLD, SimKernel, SimulatedPi, make_pi4_tree

# an isolcpus= of its own in the middle: a revert must put back this exact text, word order included
BEFORE = CMDLINE.replace("rootfstype=ext4", "isolcpus=1 rootfstype=ext4")
WORDS = ["isolcpus=managed_irq,domain,3", "nohz_full=3", "rcu_nocbs=3", "irqaffinity=0-2"]


def make_pi(sshd, pi_root, panics_with=()):
    kernels = make_pi4_tree(pi_root)
    (pi_root / "boot/firmware/cmdline.txt").write_text(BEFORE + "\n")
    (pi_root / "sys/devices/system/cpu").mkdir(parents=True)
    (pi_root / "sys/devices/system/cpu/online").write_text("0-3\n")
    kernel = SimKernel(OLD.release, OLD.version, panics_with=panics_with)
    return SimulatedPi(SshTransport("board", ssh_config=sshd.ssh_config), pi_root, {s: kernel for s in kernels})


def cmdline_now(root) -> str:
    return (root / "proc/cmdline").read_text().strip()


def state(root) -> dict | None:
    path = root / STATE_PATH.lstrip("/")
    return json.loads(path.read_text()) if path.exists() else None


@pytest.mark.root
@pytest.mark.slow
def test_isolate_words_are_tried_committed_shown_and_reverted_exactly(sshd, pi_root):
    board = make_pi(sshd, pi_root)
    config = (pi_root / "boot/firmware/config.txt").read_bytes()
    plan = tuning.plan(board, isolate="3")
    assert [c.wanted for c in plan.changes if c.kind == "cmdline"] == WORDS
    assert next(c for c in plan.changes if c.target == "isolcpus").before == "isolcpus=1"

    result = tuning.apply(board, plan)
    assert result.boot.ok and result.boot.rebooted, result.boot.message
    assert board.boot_state[1] is True                       # the words were booted as a try first
    assert cmdline_now(pi_root) == BEFORE.replace(" isolcpus=1", "") + " " + " ".join(WORDS)
    saved = state(pi_root)
    assert saved["boot_before"] == {"how": "pi", "cmdline": BEFORE}
    assert {s["applied"] for s in saved["boot"]} == set(WORDS)
    board.power_cycle()                                      # committed: an ordinary boot keeps them
    assert set(WORDS) <= set(cmdline_now(pi_root).split())

    shown = tuning.show(board)
    assert [(s.applied, running) for s, running in shown.boot_rows] == [(w, True) for w in WORDS]

    # a second tune with other CPUs: the first before-text still wins
    assert tuning.apply(board, tuning.plan(board, isolate="2-3", only=["boot-cmdline"])).boot.ok
    assert "isolcpus=managed_irq,domain,2-3" in cmdline_now(pi_root).split()
    assert state(pi_root)["boot_before"]["cmdline"] == BEFORE

    reverted = tuning.revert(board)
    assert reverted.boot.ok and reverted.boot.rebooted
    assert cmdline_now(pi_root) == BEFORE and state(pi_root) is None
    assert board.boot_state[1] is True                       # the text from before was a try first, too
    board.power_cycle()
    assert cmdline_now(pi_root) == BEFORE
    # tried once by taking rtforge's block out again: config.txt is back byte for byte, rtforge's files gone
    assert (pi_root / "boot/firmware/config.txt").read_bytes() == config
    assert not list((pi_root / "boot/firmware").glob("cmdline-rtforge*"))
    assert not (pi_root / "boot/firmware/tryboot.txt").exists()


@pytest.mark.root
@pytest.mark.slow
def test_revert_after_cmdline_txt_was_edited_still_boots_the_text_from_before(sshd, pi_root):
    board = make_pi(sshd, pi_root)
    assert tuning.apply(board, tuning.plan(board, isolate="3", only=["boot-cmdline"])).boot.ok
    (pi_root / "boot/firmware/cmdline.txt").write_text(BEFORE + " quiet\n")    # edited by hand since
    reverted = tuning.revert(board)
    assert reverted.boot.ok, reverted.boot.message
    assert cmdline_now(pi_root) == BEFORE and state(pi_root) is None
    # taking the block out would boot the edited file: a file of rtforge's holds the text from before
    config = (pi_root / "boot/firmware/config.txt").read_text()
    [name] = re.findall(r"^cmdline=(\S+)$", config, re.M)
    assert (pi_root / "boot/firmware" / name).read_text().strip() == BEFORE


@pytest.mark.root
@pytest.mark.slow
def test_runtime_settings_are_planned_again_after_the_try_and_both_are_reverted(sshd, pi_root):
    board = make_pi(sshd, pi_root)
    runtime = pi_root / "proc/sys/kernel/sched_rt_runtime_us"
    runtime.parent.mkdir(parents=True, exist_ok=True)
    runtime.write_text("950000\n")
    result = tuning.apply(board, tuning.plan(board, isolate="3"))
    assert result.boot.ok and result.replanned is not None, result.boot.message
    assert [c.target for c in result.replanned.changes] == ["/proc/sys/kernel/sched_rt_runtime_us"]
    assert runtime.read_text() == "-1\n" and len(result.applied) == len(WORDS) + 1
    saved = state(pi_root)
    assert [s["target"] for s in saved["settings"]] == ["/proc/sys/kernel/sched_rt_runtime_us"] and saved["boot"]
    reverted = tuning.revert(board)
    assert [s.target for s in reverted.restored] == ["/proc/sys/kernel/sched_rt_runtime_us"] and reverted.boot.ok
    assert runtime.read_text() == "950000\n" and cmdline_now(pi_root) == BEFORE and state(pi_root) is None


@pytest.mark.root
@pytest.mark.slow
def test_words_the_kernel_panics_with_fall_back_and_leave_no_record(sshd, pi_root):
    board = make_pi(sshd, pi_root, panics_with=("nohz_full=3",))
    config = (pi_root / "boot/firmware/config.txt").read_bytes()
    result = tuning.apply(board, tuning.plan(board, isolate="3"))
    assert not result.boot.ok and result.boot.rebooted
    assert "did not boot, so the firmware fell back" in result.boot.message
    assert {c.wanted for c, _ in result.failed} == set(WORDS) and not result.applied
    assert cmdline_now(pi_root) == BEFORE and board.boot_state[1] is False
    assert (pi_root / "boot/firmware/config.txt").read_bytes() == config
    assert state(pi_root) is None                            # nothing of rtforge's is on the command line


@pytest.fixture
def pi3():
    root = copy_tree("pi3")
    yield root
    remove_tree(root)


def test_fiq_words_follow_doctors_finding(pi3):
    """The pi3 tree runs an RT kernel (isolcpus=3 already, without managed_irq) with the FIQ off: nothing to
    add for the FIQ until its module says it is on."""
    board = Device(LocalTransport(), root=str(pi3))
    fiq = ["dwc_otg.fiq_enable=0", "dwc_otg.fiq_fsm_enable=0"]
    cmdline = pi3 / "proc/cmdline"
    cmdline.write_text(" ".join(w for w in cmdline.read_text().split() if w not in fiq) + "\n")
    assert [c.wanted for c in tuning.plan(board, isolate="3").changes if c.kind == "cmdline"] == \
        WORDS
    for name in ("fiq_enable", "fiq_fsm_enable"):
        (pi3 / "sys/module/dwc_otg/parameters" / name).write_text("Y\n")
    assert [c.wanted for c in tuning.plan(board, isolate="3").changes if c.kind == "cmdline"] == \
        [*WORDS, *fiq]


def test_dry_run_prints_the_words_and_changes_nothing(pi3, capsys):
    before = tree_digest(pi3)
    assert main(["tune", "--sysroot", str(pi3), "--isolate", "2-3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "boot-cmdline (isolation on the kernel command line (tried once at a reboot)): would change 4" in out
    for line in ("isolcpus: isolcpus=3 -> isolcpus=managed_irq,domain,2-3", "nohz_full: (not set) -> nohz_full=2-3",
                 "rcu_nocbs: (not set) -> rcu_nocbs=2-3", "irqaffinity: (not set) -> irqaffinity=0-1"):
        assert f"{line}   (kernel command line)" in out
    assert tree_digest(pi3) == before


def test_plain_tune_never_plans_the_command_line(pi3):
    board = Device(LocalTransport(), root=str(pi3))
    plan = tuning.plan(board)
    assert not [c for c in plan.changes if c.kind == "cmdline"] and plan.notes["boot-cmdline"] == [tuning.BOOT_NOTE]


def test_a_tree_without_a_boot_loader_is_not_given_boot_words(pi3):
    board = Device(LocalTransport(), root=str(pi3))
    result = tuning.apply(board, tuning.plan(board, isolate="2-3", only=["boot-cmdline"]))
    assert not result.boot.ok and "neither a Raspberry Pi boot partition" in result.boot.message
    assert not (pi3 / STATE_PATH.lstrip("/")).exists()


def test_grub_dropin_adds_the_words_for_a_real_shell(tmp_path):
    dropin = tmp_path / "rtforge-tune.cfg"
    dropin.write_text(dropin_text(WORDS))
    # as grub-mkconfig does: /etc/default/grub first, then each drop-in, in one shell
    got = subprocess.run(["sh", "-c", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"; . "$1"; '
                                      'printf %s "$GRUB_CMDLINE_LINUX_DEFAULT"', "sh", str(dropin)],
                         capture_output=True, text=True, check=True).stdout
    assert got == "quiet splash " + " ".join(WORDS)
    assert DROPIN.startswith("/etc/default/grub.d/") and DROPIN.endswith(".cfg")


@pytest.mark.parametrize("word", ['isolcpus=3"', "a=$(reboot)", "x=`id`", "two words", "back\\slash"])
def test_grub_dropin_refuses_words_the_shell_would_read_otherwise(word):
    with pytest.raises(UserError, match="cannot go into a GRUB drop-in"):
        dropin_text(["isolcpus=3", word])


@pytest.mark.slow
@pytest.mark.root
def test_a_pi_without_tryboot_is_refused_and_keeps_no_record(sshd, pi_root):
    board = make_pi(sshd, pi_root)
    (pi_root / "proc/device-tree/chosen/bootloader/tryboot").unlink()   # old firmware: no tryboot
    boot_before = board.boot_state
    result = tuning.apply(board, tuning.plan(board, isolate="3"))
    assert not result.boot.ok and "has no tryboot" in result.boot.message and not result.boot.rebooted
    assert board.boot_state == boot_before and cmdline_now(pi_root) == BEFORE and state(pi_root) is None
