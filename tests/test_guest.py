"""The QEMU guest is a faithful Debian/GRUB board (what the deploy tests rely on).

Real parts only: the guest boots through SeaBIOS and GRUB from its own disk,
sshd is Debian's, the RT kernel is Debian's linux-image-rt-amd64 installed
offline with dpkg, reboots are real reboots of the emulated PC.  What is
asserted is what a deploy depends on: grub-reboot boots an entry exactly
once, grub-set-default makes it permanent, and a kernel that panics brings
the guest back on the saved default by itself.
"""

from __future__ import annotations

import subprocess
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.root]


def install(guest, debs) -> None:
    """Upload .debs and install them offline, as deploy will."""
    guest.ssh("mkdir -p /root/debs")
    for deb in debs:
        guest.put(deb, f"/root/debs/{deb.name}")
    # dpkg -i unpacks ~400 MB of modules and builds an initramfs under TCG
    r = guest.ssh("dpkg -i " + " ".join(f"/root/debs/{d.name}" for d in debs), timeout=3600)
    assert "Generating grub configuration file" in r.stdout + r.stderr  # the kernel hooks ran update-grub


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


def test_rt_kernel_boots_once_with_grub_reboot_then_permanently(guest, guest_image):
    stock, rt = guest_image.stock_release, guest_image.rt_release
    t0 = time.monotonic()
    install(guest, guest_image.rt_debs)
    print(f"dpkg -i of the RT kernel: {time.monotonic() - t0:.0f} s")
    assert running(guest)[0] == stock
    # Installing must not have changed what boots by default.
    assert guest.grubenv()["saved_entry"] == guest_image.stock_entry
    entry = guest.grub_entry(rt)

    guest.ssh(f"grub-reboot '{entry}'")
    assert guest.grubenv()["next_entry"] == entry
    print(f"reboot into RT: {guest.reboot():.0f} s")
    release, version = running(guest)
    assert release == rt and "PREEMPT_RT" in version
    assert guest.ssh("cat /sys/kernel/realtime").stdout.strip() == "1"  # Debian's 6.1 RT is the patched kernel
    # The boot was the one-time entry: GRUB consumed next_entry and the
    # saved default is still the stock kernel.
    env = guest.grubenv()
    assert not env.get("next_entry") and env["saved_entry"] == guest_image.stock_entry
    assert guest.grub_boots()[-1] == f"Debian GNU/Linux, with Linux {rt}"

    print(f"reboot (one-time entry used up): {guest.reboot():.0f} s")
    assert running(guest)[0] == stock
    assert guest.grub_boots()[-1] == f"Debian GNU/Linux, with Linux {stock}"

    # Commit, as deploy does after a verified try: now RT boots every time.
    guest.ssh(f"grub-set-default '{entry}'")
    print(f"reboot after grub-set-default: {guest.reboot():.0f} s")
    assert running(guest)[0] == rt and guest.grubenv()["saved_entry"] == entry
    assert guest.boots() == [stock, rt, stock, rt] and guest.reboot_count() == 3


def test_unbootable_kernel_falls_back_to_the_saved_default(guest, guest_image):
    stock, bad = guest_image.stock_release, guest_image.unbootable_release
    install(guest, [guest_image.unbootable_deb])
    entry = guest.grub_entry(bad)
    guest.ssh(f"grub-reboot '{entry}'")
    resets, kernels = guest.reboot_count(), len(guest.boots())

    # Nobody touches the guest from here: the bad kernel panics, panic=10
    # resets the PC, and GRUB boots the saved default because grub-reboot's
    # entry was used up when GRUB chose it.
    t0 = time.monotonic()
    guest.ssh("systemctl reboot", check=False)
    guest.wait_reboot(resets)
    print(f"reboot into the unbootable kernel and back: {time.monotonic() - t0:.0f} s")

    assert running(guest)[0] == stock
    console = guest.console()
    assert "Kernel panic - not syncing: VFS: Unable to mount root fs" in console
    assert guest.grub_boots()[-2:] == [f"Debian GNU/Linux, with Linux {bad}", f"Debian GNU/Linux, with Linux {stock}"]
    # The bad image is Debian's RT kernel: it started, panicked, and the reset
    # after the panic brought up the stock kernel.
    assert guest.boots()[kernels:] == [guest_image.rt_release, stock]
    assert guest.reboot_count() == resets + 2
    env = guest.grubenv()
    assert env["saved_entry"] == guest_image.stock_entry and not env.get("next_entry")
