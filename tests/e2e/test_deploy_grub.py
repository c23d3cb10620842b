"""Deploying to a Debian/GRUB board: a real PC (QEMU x86_64, TCG) booting
through SeaBIOS and GRUB, Debian's real linux-image RT package, real reboots.

Slow (an apt install and a reboot under TCG take minutes each): this is the
end-to-end proof of the GRUB path; tests/integration/test_deploy_pi.py covers each
failing step quickly.
"""

from __future__ import annotations

import pytest

from rtforge.cli import main
from rtforge.device import SshTransport
from rtforge.device.deploy.deb import deploy_grub, read_deb
from rtforge.device.deploy.grubtry import menu_entries
from rtforge.device.transport.device import Device

from ..support.rtguest import rt_image_deb

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.guest]


def test_rt_deb_is_tried_once_verified_and_committed(rt_guest_image):
    """The session's one RT deploy (tests/support/rtguest.py): `rtforge
    deploy guest DEB` as a user types it, what it printed and left."""
    d, image = rt_guest_image, rt_guest_image.base
    assert d.deploy.returncode == 0, d.why()
    assert f"done: guest runs {image.rt_release} (PREEMPT_RT) and now boots it by default: GRUB entry" in \
        d.deploy.stdout
    assert d.uname_v.split().count("PREEMPT_RT") == 1
    entry = menu_entries(d.grub_cfg)[image.rt_release]
    assert d.grubenv["saved_entry"] == entry and not d.grubenv.get("next_entry")
    assert d.boots == [image.stock_release, image.rt_release]  # one reboot: the try
    assert d.grub_boots[-1] == f"Debian GNU/Linux, with Linux {image.rt_release}"
    assert d.after_reboot == image.rt_release  # committed: it stays


def test_unbootable_kernel_falls_back_and_is_removed(guest, guest_image):
    board = Device(SshTransport("guest", ssh_config=guest.ssh_config))
    deb = read_deb(guest_image.unbootable_deb)
    result = deploy_grub(board, deb, timeout_s=900)
    assert not result.ok and result.state == "fell-back" and result.running == guest_image.stock_release
    assert "the new kernel did not boot, so GRUB used its default" in result.message
    env = guest.grubenv()
    assert env["saved_entry"] == guest_image.stock_entry and not env.get("next_entry")
    listed = guest.ssh(f"dpkg-query -W -f='${{Status}}' {deb.package}", check=False).stdout
    assert "installed" not in listed or "not-installed" in listed or "config-files" in listed
    # From the console: GRUB chose the bad entry once, the kernel (Debian's RT
    # image without its initramfs) panicked, panic=10 reset the PC and GRUB
    # took the saved default.
    assert "Kernel panic - not syncing: VFS: Unable to mount root fs" in guest.console()
    assert guest.grub_boots()[-2:] == [f"Debian GNU/Linux, with Linux {guest_image.unbootable_release}",
                                       f"Debian GNU/Linux, with Linux {guest_image.stock_release}"]
    assert guest.boots()[-2:] == [guest_image.rt_release, guest_image.stock_release]
    assert guest.reboot_count() == 2


def test_refusals_before_anything_changes(guest, guest_image, tmp_path, capsys):
    meta = next(d for d in guest_image.rt_debs if d != rt_image_deb(guest_image))
    assert main(["deploy", "guest", str(meta), "--ssh-config", str(guest.ssh_config)]) == 2
    assert "metapackage" in capsys.readouterr().err
    before = guest.grubenv()
    guest.ssh("sed -i 's/^GRUB_DEFAULT=.*/GRUB_DEFAULT=0/' /etc/default/grub")
    assert main(["deploy", "guest", str(rt_image_deb(guest_image)), "--ssh-config", str(guest.ssh_config)]) == 2
    assert "GRUB_DEFAULT=0: trying a kernel once needs GRUB_DEFAULT=saved" in capsys.readouterr().err
    assert guest.grubenv() == before
