"""`rtforge tune --isolate` on a GRUB board, for real: the QEMU PC guest
(SeaBIOS, Debian's GRUB, real reboots) with two CPUs.  The command line is
tried once through a menu entry of rtforge's own (grub-reboot), verified in
/proc/cmdline, then committed as a drop-in; a command line the kernel panics
with falls back to GRUB's saved default; `--revert` is tried once too.

Slow (five boots under TCG): the fast tests of the pieces are in
tests/unit/device/test_grubcmdline.py.
"""

from __future__ import annotations

import pytest

from rtforge.cli import main
from rtforge.device import SshTransport
from rtforge.device.deploy.grubcmdline import DROPIN, TRY_ID, TRY_SCRIPT, TRY_TITLE, dropin_text, tune_grub_cmdline
from rtforge.device.state.tunestate import STATE_PATH
from rtforge.device.transport.device import Device
from rtforge.device.tune import engine as tuning

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.guest]

WORDS = ["isolcpus=managed_irq,domain,1", "nohz_full=1", "rcu_nocbs=1", "irqaffinity=0"]


@pytest.fixture
def pc(guest_image, tmp_path):
    from ..support.guest import running_guest

    with running_guest(guest_image, tmp_path / "guest", cpus=2) as g:
        yield g


def exists(g, path: str) -> bool:
    return g.ssh(f"test -e {path}", check=False).returncode == 0


def test_isolation_words_are_tried_once_committed_and_reverted_through_grub(pc, guest_image, capsys):
    ssh = ["--ssh-config", str(pc.ssh_config)]
    board = Device(SshTransport("guest", ssh_config=pc.ssh_config))
    cfg_before, env_before = pc.ssh("cat /boot/grub/grub.cfg").stdout, pc.grubenv()

    # GRUB_DEFAULT=0: grub-reboot cannot work, refused before anything changes
    pc.ssh("sed -i 's/^GRUB_DEFAULT=.*/GRUB_DEFAULT=0/' /etc/default/grub")
    refused = tuning.apply(board, tuning.plan(board, isolate="1", only=["boot-cmdline"]))
    assert not refused.boot.ok and "GRUB_DEFAULT=saved" in refused.boot.message
    assert not exists(pc, TRY_SCRIPT) and not exists(pc, DROPIN) and not exists(pc, STATE_PATH)
    assert pc.ssh("cat /boot/grub/grub.cfg").stdout == cfg_before and pc.grubenv() == env_before
    pc.ssh("sed -i 's/^GRUB_DEFAULT=.*/GRUB_DEFAULT=saved/' /etc/default/grub")

    # the try: rtforge's entry, once; verified; committed as the drop-in
    boots = len(pc.boots())
    assert main(["tune", "guest", "--isolate", "1", "--only", "boot-cmdline", *ssh]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert len(pc.boots()) == boots + 1
    assert pc.grub_boots()[-1] == TRY_TITLE          # GRUB's console: the try entry booted
    cmdline = pc.ssh("cat /proc/cmdline").stdout.split()
    assert all(w in cmdline for w in WORDS) and any(w.startswith("rtforge.try=") for w in cmdline)
    assert not exists(pc, TRY_SCRIPT) and TRY_ID not in pc.ssh("cat /boot/grub/grub.cfg").stdout
    assert pc.ssh(f"cat {DROPIN}").stdout == dropin_text(WORDS)
    env = pc.grubenv()
    assert env["saved_entry"] == guest_image.stock_entry and not env.get("next_entry")
    assert pc.ssh("cat /sys/devices/system/cpu/isolated").stdout.strip() == "1"    # the kernel took them
    pc.reboot()                                       # committed: GRUB's default entry has them now
    cmdline = pc.ssh("cat /proc/cmdline").stdout.split()
    assert all(w in cmdline for w in WORDS) and not any(w.startswith("rtforge.try=") for w in cmdline)
    assert pc.grub_boots()[-1] == f"Debian GNU/Linux, with Linux {guest_image.stock_release}"

    # a command line the kernel panics with (no initramfs init: it cannot mount root=UUID= by itself)
    dropin = pc.ssh(f"cat {DROPIN}").stdout
    bad = tune_grub_cmdline(board, ["rdinit=/rtforge-no-such-init"], [], dropin, label="a bad one")
    assert not bad.ok and bad.state == "fell-back", bad.message
    assert "GRUB used its default entry" in bad.message
    assert "Kernel panic - not syncing: VFS: Unable to mount root fs" in pc.console()
    assert pc.grub_boots()[-2] == TRY_TITLE
    assert pc.grub_boots()[-1] == f"Debian GNU/Linux, with Linux {guest_image.stock_release}"
    assert not exists(pc, TRY_SCRIPT) and TRY_ID not in pc.ssh("cat /boot/grub/grub.cfg").stdout
    assert pc.ssh(f"cat {DROPIN}").stdout == dropin
    assert "rdinit=/rtforge-no-such-init" not in pc.ssh("cat /proc/cmdline").stdout

    # --revert: tried once as well; afterwards no word, no drop-in, no record
    assert main(["tune", "guest", "--revert", *ssh]) == 0
    out = capsys.readouterr().out
    assert f"boots its command line from before again: no {DROPIN}" in out, out
    cmdline = pc.ssh("cat /proc/cmdline").stdout.split()
    assert not any(w in cmdline for w in WORDS)
    assert not exists(pc, DROPIN) and not exists(pc, TRY_SCRIPT) and not exists(pc, STATE_PATH)
    pc.reboot()
    assert not any(w in pc.ssh("cat /proc/cmdline").stdout.split() for w in WORDS)
