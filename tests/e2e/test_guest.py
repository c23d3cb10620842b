"""The QEMU guest is a faithful Debian/GRUB board (what the deploy tests rely on).

This file checks the fixture itself: the guest boots the stock kernel
through SeaBIOS and GRUB with the settings deploy depends on.  What GRUB does
with a tried, a committed and an unbootable kernel is proved end to end, with
rtforge doing the deploying, in tests/e2e/test_deploy_grub.py (they were first
written here by hand; two guest reboots under TCG cost minutes each).
"""

from __future__ import annotations

import subprocess

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.guest]


def running(guest) -> tuple[str, str]:
    return guest.ssh("uname -r").stdout.strip(), guest.ssh("uname -v").stdout.strip()


def test_boots_stock_kernel_through_grub_and_checks_host_keys(guest, guest_image, tmp_path):
    release, version = running(guest)
    assert release == guest_image.stock_release and "PREEMPT_RT" not in version
    # Booted by GRUB from the disk (QEMU's direct kernel boot sets no BOOT_IMAGE),
    # through the saved default, with the console and panic=N on the cmdline.
    cmdline = guest.ssh("cat /proc/cmdline").stdout
    assert cmdline.startswith(f"BOOT_IMAGE=/boot/vmlinuz-{release} ") and "panic=10" in cmdline
    assert guest.grub_boots() == [f"Debian GNU/Linux, with Linux {release}"]
    env = guest.grubenv()
    assert env["saved_entry"] == guest_image.stock_entry and not env.get("next_entry")
    assert guest.reboot_count() == 0 and guest.boots() == [release]
    # The non-root login gets root through sudo without a password.
    r = subprocess.run(["ssh", "-F", str(guest.ssh_config), "guest-sudo", "sudo -n id -u"], capture_output=True,
                       text=True, timeout=60)
    assert r.stdout.strip() == "0", r.stderr
    # Host-key checking is on: a different key for the guest is refused.
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    (guest.dir / "known_hosts").write_text(f"[127.0.0.1]:{guest.port} {(tmp_path / 'other.pub').read_text()}")
    r = subprocess.run(guest.ssh_argv("true"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 255 and "Host key verification failed" in r.stderr
