"""A device: a board (or this machine, or a tree under a root directory)
reached through a transport, as deploy, doctor, tune and `rtforge target
info` see it -- its facts, its package manager, reboot, wait.

All paths on the device go through ``Device.path`` so that a device can live
under a root directory (a test tree reached over a real sshd); on a real
board the root is "/".  Reading the facts, rebooting and regenerating
grub.cfg are the only things a simulated board (tests) replaces -- files and
packages always move for real.

(Names once shared: the kernel build profile is kernel/boards.py's `Board`;
a device reached through a transport is `Device` here; where a latency run's
folder lives is measure/target.py's `RunSite`; what config.txt filters see
of a Raspberry Pi is device/firmware/pimodels.py's `PiModel`.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...errors import UserError
from .facts import DeviceFacts, read_facts
from .transport import ConnectionLost, Transport


class Device:
    def __init__(self, transport: Transport, root: str = "/"):
        self.t = transport
        self.root = root.rstrip("/")

    @property
    def name(self) -> str:
        return self.t.name

    def path(self, p: str) -> str:
        """A path on the target, under its root."""
        return self.root + p if self.root else p

    def facts(self) -> DeviceFacts:
        """Everything in one round trip (facts.py)."""
        return read_facts(self.t, self.root)

    # -- its package manager ---------------------------------------------------
    def apt_get(self, *args: str) -> list[str]:
        """argv of apt-get on the target, never asking a question.  A target
        under a root directory has its own dpkg database and apt
        configuration there (<root>/etc/apt/apt.conf, read through
        APT_CONFIG); without one, apt would change the machine the target
        lives on, so that is refused."""
        env = ["env", "DEBIAN_FRONTEND=noninteractive"]
        if self.root:
            env.append(f"APT_CONFIG={self.path('/etc/apt/apt.conf')}")
            if not self.t.exists(self.path("/etc/apt/apt.conf")):
                raise UserError(
                    f"{self.name} lives under {self.root} but has no {self.path('/etc/apt/apt.conf')}: "
                    "apt would install into the machine around it; give the tree its own apt "
                    "configuration (Dir and dpkg's --root)"
                )
        return [*env, "apt-get", "-y", "-q", *args]

    def dpkg_query(self, *args: str) -> list[str]:
        """argv of dpkg-query on the target's own package database."""
        return ["dpkg-query", *([f"--root={self.root}"] if self.root else []), *args]

    def boot_id(self) -> str:
        return self.t.read_text(self.path("/proc/sys/kernel/random/boot_id"), step="reading the boot id").strip()

    # -- its boot loader ---------------------------------------------------------
    def runs_grub(self) -> bool:
        """Whether rtforge may run this target's update-grub: not for a tree under a
        root directory, whose boot loader is not the one of the machine it lives on."""
        return not self.root

    def update_grub(self):
        """Regenerate grub.cfg (Debian's update-grub); the transport's result."""
        if not self.runs_grub():
            raise UserError(f"{self.name} is a tree under {self.root}: rtforge does not run update-grub for it")
        return self.t.run(["update-grub"], sudo=True, timeout=300)

    # -- reboot and come back -------------------------------------------------
    reboot_tools: tuple[str, ...] = ("reboot",)  # what reboot() runs there (tools.toml names the package)

    def reboot(self, tryboot: bool) -> None:
        """Reboot; with tryboot the firmware reads tryboot.txt once.  The
        connection drops as the board goes down: that is the expected end."""
        argv = ["reboot", "0 tryboot"] if tryboot else ["reboot"]
        try:
            # detached, so the command returns before sshd is stopped
            self.t.run(["sh", "-c", 'sleep 1; exec "$@"', "sh", *argv], sudo=True, timeout=15)
        except ConnectionLost:
            pass

    def wait_back(
        self, old_boot_id: str, timeout_s: float, progress: Callable[[float], None] | None = None, poll_s: float = 2.0
    ) -> bool:
        """Wait until the board answers with a new boot id; False on timeout."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if progress:
                progress(time.monotonic() - start)
            try:
                bid = self.t.run(["cat", self.path("/proc/sys/kernel/random/boot_id")], timeout=10)
                if bid.returncode == 0 and bid.stdout.strip() and bid.stdout.strip() != old_boot_id:
                    return True
            except (ConnectionLost, UserError):
                pass  # still down
            time.sleep(poll_s)
        return False
