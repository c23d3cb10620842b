"""The guest image with Debian's PREEMPT_RT kernel deployed by rtforge.

A deploy under TCG (apt install, a try boot, the commit) takes minutes, and
three e2e files need a Debian/GRUB board running RT: the deploy test judges
this one deploy, the trace and monitor tests boot from its disk.  The
deploy is rtforge's own command line, run as a user runs it (`rtforge
deploy guest DEB`), on a guest booted from an overlay of the cached image;
after a reboot (the commit must hold) the guest powers off cleanly and its
overlay becomes the base of the next guests' overlays.  Nothing is cached
past the session: the image of a session is made by the code under test of
that session.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rtforge.device.deploy.deb import read_deb
from rtforge.errors import UserError

from .guest import start_guest
from .guestimage import GuestImage

# A spike on purpose, for rtla to name: a busy SCHED_FIFO 99 thread on CPU 0.
# perl-base is in every Debian root; $0 sets the thread's comm on Linux.  The
# busy loop is counted, not timed (Time::HiRes is not in perl-base), then it
# sleeps 1.5 s (select) and again.  Under TCG 4e6 rounds took ~2.2 s (CI,
# 2026-11-27), and rtla printed that spike as a negative latency (the
# fixture tests/fixtures/rtla/negative-thread-latency.txt): 1.5e6 keeps a
# burst under a second, and still far over the tests' 20 ms threshold.
HOG = "rtforge-hog"
HOG_CMD = (f"nohup chrt -f 99 taskset -c 0 perl -e '$0 = \"{HOG}\"; "
           "while (1) { for (my $i = 0; $i < 1.5e6; $i++) {} select(undef, undef, undef, 1.5) }' "
           ">/dev/null 2>&1 </dev/null &")


@dataclass
class DeployedImage:
    """A disk whose kernel rtforge deployed, and what the deploy showed."""
    base: GuestImage
    disk: Path
    deploy: subprocess.CompletedProcess      # `rtforge deploy`, its exit status and output
    uname_v: str = ""                        # right after the deploy
    grubenv: dict[str, str] = field(default_factory=dict)
    grub_cfg: str = ""
    boots: list[str] = field(default_factory=list)       # kernels started, from the console
    grub_boots: list[str] = field(default_factory=list)  # GRUB entries booted, from the console
    after_reboot: str = ""                   # `uname -r` after one more reboot

    @property
    def key(self) -> Path:
        return self.base.key

    @property
    def host_key(self) -> str:
        return self.base.host_key

    @property
    def ok(self) -> bool:
        return self.deploy.returncode == 0 and self.after_reboot == self.base.rt_release

    def why(self) -> str:
        return (f"`rtforge deploy` exited {self.deploy.returncode}, the guest then ran {self.after_reboot!r}:\n"
                f"{self.deploy.stdout}{self.deploy.stderr}")


def rt_image_deb(image: GuestImage) -> Path:
    """linux-image-<rt release> (the other .deb is its metapackage)."""
    for deb in image.rt_debs:
        try:
            read_deb(deb)
            return deb
        except UserError:  # the metapackage: read_deb refuses it (tested in test_deploy_grub)
            continue
    raise AssertionError(f"no kernel image package among {image.rt_debs}")


def deploy_rt(image: GuestImage, dir: Path) -> DeployedImage:
    guest = start_guest(image, dir)
    try:
        done = subprocess.run([sys.executable, "-m", "rtforge", "deploy", "guest", str(rt_image_deb(image)),
                               "--ssh-config", str(guest.ssh_config), "--timeout", "15m"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
        d = DeployedImage(image, guest.disk, done)
        if done.returncode != 0:
            return d
        d.uname_v = guest.ssh("uname -v").stdout
        d.grubenv, d.grub_cfg = guest.grubenv(), guest.ssh("cat /boot/grub/grub.cfg").stdout
        d.boots, d.grub_boots = guest.boots(), guest.grub_boots()
        guest.reboot()
        d.after_reboot = guest.ssh("uname -r").stdout.strip()
        guest.poweroff()  # a clean shutdown: the overlay is a consistent disk for the next guests
        return d
    finally:
        guest.stop()
