"""SIMULATION of a Debian/GRUB board's update-grub and reboots, for the fast
tests of `rtforge tune` on GRUB (tests/test_tuneboot.py); the end-to-end
proof on a real GRUB is the QEMU guest (tests/support/guest.py).

Only two things are simulated, as small as possible:
  update_grub  a real sh reads <root>/etc/default/grub and then every
               <root>/etc/default/grub.d/*.cfg, in that order and in one
               shell, as Debian's grub-mkconfig does (so a syntax error there
               fails it, as it fails update-grub), and writes the one linux
               line grub.cfg would get from GRUB_CMDLINE_LINUX and
               GRUB_CMDLINE_LINUX_DEFAULT;
  reboot       the kernel's /proc/cmdline becomes that line's arguments, and
               the boot id changes.
It deliberately does not use rtforge's own drop-in code to read the drop-in.
The files are a real tree reached through a real transport.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from rtforge.device.target import Target

RELEASE = "6.1.0-28-rt-amd64"
DEFAULT_GRUB = """\
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX="console=ttyS0,115200 panic=10"
"""

_MKCONFIG = r"""
set -e
R="$1"
. "$R/etc/default/grub"
for x in "$R"/etc/default/grub.d/*.cfg; do
  if [ -e "$x" ]; then . "$x"; fi
done
printf 'linux /boot/vmlinuz-%s root=UUID=0d6b0b5e ro %s %s\n' "$2" "$GRUB_CMDLINE_LINUX" \
  "$GRUB_CMDLINE_LINUX_DEFAULT" > "$R/boot/grub/grub.cfg"
"""


class SimulatedGrubBoard(Target):
    reboot_tools = ()

    def __init__(self, transport, root: Path, cpus: str = "0-3"):
        super().__init__(transport, str(root))
        self.tree = root
        for rel, text in {"etc/default/grub": DEFAULT_GRUB, "sys/devices/system/cpu/online": cpus + "\n",
                          "proc/cmdline": "", "proc/sys/kernel/random/boot_id": ""}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        (root / "boot/grub").mkdir(parents=True)
        r = self.update_grub()
        assert r.returncode == 0, r.stderr
        self.reboot(tryboot=False)

    def runs_grub(self) -> bool:
        return True

    def update_grub(self):
        return self.t.run(["sh", "-c", _MKCONFIG, "sh", self.root, RELEASE], sudo=True)

    def grub_linux_line(self) -> str:
        return (self.tree / "boot/grub/grub.cfg").read_text().strip()

    def reboot(self, tryboot: bool) -> None:
        words = self.grub_linux_line().split()[1:]
        (self.tree / "proc/cmdline").write_text(" ".join([f"BOOT_IMAGE={words[0]}", *words[1:]]) + "\n")
        (self.tree / "proc/sys/kernel/random/boot_id").write_text(str(uuid.uuid4()) + "\n")

    def facts(self):
        return dataclasses.replace(super().facts(), machine="x86_64", release=RELEASE, grub=True)
