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
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ...errors import UserError
from ...preempt import preempt_model
from .transport import ConnectionLost, Transport

# config.txt lives in /boot/firmware on Raspberry Pi OS bookworm and later,
# in /boot before; the firmware's tryboot flag is
# /proc/device-tree/chosen/bootloader/tryboot (absent: no tryboot support).


@dataclass
class DeviceFacts:
    model: str | None           # /proc/device-tree/model, e.g. "Raspberry Pi 4 Model B Rev 1.4"
    machine: str                # uname -m
    release: str                # uname -r
    version: str                # uname -v
    realtime: int | None        # /sys/kernel/realtime (RT-patched kernels only)
    os: str | None              # PRETTY_NAME of /etc/os-release
    boot_dir: str | None        # where config.txt is (None: not a Raspberry Pi firmware layout)
    boot_free_kb: int | None
    root_free_kb: int | None
    tryboot_supported: bool     # the firmware exposes the tryboot flag
    tryboot_now: bool | None    # this boot was a try (tryboot.txt)
    boot_id: str                # changes on every boot
    grub: bool                  # a GRUB system (x86 and others): grub-reboot is there
    is_root: bool
    panic_s: int | None = None  # /proc/sys/kernel/panic: seconds until a panicked kernel resets (0: never)
    cmdline: str = ""           # /proc/cmdline: what this boot's kernel was given

    @property
    def preempt_model(self) -> str:
        return preempt_model(self.version, None, self.realtime)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "preempt_model": self.preempt_model}

    def panic_warning(self, where: str) -> str | None:
        """A kernel that panics only falls back if it resets: say how, when it would not."""
        if self.panic_s != 0:
            return None
        return ("a kernel that panics will hang here instead of resetting, so falling back needs a power cycle: "
                f"add panic=10 to the kernel command line ({where}) or enable a hardware watchdog")


# One script, one round trip.  "$1" is the board's root ("" on a real board);
# each fact follows a line "@@name".  The tryboot flag is a big-endian u32
# property, printed as bytes by od.
_FACTS_SCRIPT = r"""
R="$1"
s() { printf '\n@@%s\n' "$1"; }
s machine; uname -m
s release; uname -r
s version; uname -v
s model; cat "$R/proc/device-tree/model" 2>/dev/null | tr -d '\000'
s realtime; cat "$R/sys/kernel/realtime" 2>/dev/null
s os; cat "$R/etc/os-release" 2>/dev/null
B=""; for d in /boot/firmware /boot; do if [ -e "$R$d/config.txt" ]; then B="$d"; break; fi; done
s bootdir; echo "$B"
s tryboot; od -An -tu1 "$R/proc/device-tree/chosen/bootloader/tryboot" 2>/dev/null
s bootid; cat "$R/proc/sys/kernel/random/boot_id"
s df_boot; [ -n "$B" ] && df -P -k "$R$B" 2>/dev/null
s df_root; df -P -k "$R/" 2>/dev/null
s grub; command -v grub-reboot
s uid; id -u
s panic; cat "$R/proc/sys/kernel/panic" 2>/dev/null
s cmdline; cat "$R/proc/cmdline" 2>/dev/null
exit 0
"""


def _df_free(text: str) -> int | None:
    lines = text.strip().splitlines()
    return int(lines[-1].split()[3]) if len(lines) >= 2 else None


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
        """Everything in one round trip (a board on Wi-Fi pays for each)."""
        out = self.t.run(
            ["sh", "-c", _FACTS_SCRIPT, "sh", self.root], check=True, step="reading the board's facts"
        ).stdout
        v: dict[str, str] = {}
        for block in out.split("\n@@")[1:]:
            key, _, value = block.partition("\n")
            v[key] = value.strip("\n\0 ")
        pretty = next(
            (
                line.split("=", 1)[1].strip('"')
                for line in v.get("os", "").splitlines()
                if line.startswith("PRETTY_NAME=")
            ),
            None,
        )
        flag = [int(b) for b in v.get("tryboot", "").split()]
        return DeviceFacts(
            model=v.get("model") or None,
            machine=v["machine"],
            release=v["release"],
            version=v["version"],
            realtime=int(v["realtime"]) if v.get("realtime", "").isdigit() else None,
            os=pretty,
            boot_dir=v.get("bootdir") or None,
            boot_free_kb=_df_free(v.get("df_boot", "")),
            root_free_kb=_df_free(v.get("df_root", "")),
            tryboot_supported=len(flag) >= 4,
            tryboot_now=bool(int.from_bytes(bytes(flag[:4]), "big")) if len(flag) >= 4 else None,
            boot_id=v.get("bootid", ""),
            grub=bool(v.get("grub")),
            is_root=v.get("uid") == "0",
            panic_s=int(v["panic"]) if v.get("panic", "").lstrip("-").isdigit() else None,
            cmdline=v.get("cmdline", ""),
        )

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
        return self.t.run(["cat", self.path("/proc/sys/kernel/random/boot_id")]).stdout.strip()

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
