"""Raspberry Pi's own RT kernel, the fast path: `rtforge deploy HOST --official`.

Raspberry Pi OS packages an RT kernel, linux-image-rpi-v8-rt (built from
bcm2711_rt_defconfig: 64-bit, 4K pages, so it runs on the Pi 3, 4 and 5),
which puts kernel8_rt.img on the boot partition; config.txt selects it with
kernel=kernel8_rt.img.  Raspberry Pi calls it experimental, which is one
more reason to take the same try-once path as a built kernel
(tryonce.py, pitry.py):

  check    a 64-bit Pi, apt there, not running this kernel already
  install  apt-get update; apt-get install linux-image-rpi-v8-rt (apt verifies
           the download against the signed repository: the upload check of
           this path); its release from the package's own file list
  arm      tryboot.txt = config.txt + kernel=kernel8_rt.img, arm_64bit=1
  verify   uname -r is the package's release, uname -v holds the marker its
           /boot/config-<release> implies, the try flag
  commit   config.txt gets the block; on a fall-back the package goes again
           (unless it was installed before).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ...errors import UserError
from ..firmware.bootcfg import BootChoice
from ..firmware.pimodels import model_for_dt
from ..transport.device import Device
from ..transport.facts import DeviceFacts
from .manifest import uname_v_marker
from .pitry import PiPayload, PiTryboot
from .steps import Steps
from .tryonce import DeployResult, Expect, try_once

PACKAGE = "linux-image-rpi-v8-rt"
IMAGE = "kernel8_rt.img"
INITRAMFS = "initramfs8_rt"  # what the firmware's auto_initramfs would derive from IMAGE
APT_TIMEOUT_S = 1800


def _installed(target: Device, *packages: str) -> list[str]:
    """Those of `packages` (at least one) that dpkg has installed on the target."""
    out = target.t.run(target.dpkg_query("-W", "-f", "${Package} ${Status}\n", *packages)).stdout
    return [line.split()[0] for line in out.splitlines() if line.endswith(" install ok installed")]


def official_packages(target: Device) -> list[str]:
    """The official package and the kernel packages it depends on (Raspberry
    Pi OS makes linux-image-rpi-v8-rt a metapackage of linux-image-<release>)."""
    if not _installed(target, PACKAGE):
        return []
    deps = target.t.run(target.dpkg_query("-W", "-f", "${Depends}", PACKAGE)).stdout
    names = sorted(set(re.findall(r"(?:^|,)\s*(linux-image-[^\s,|(]+)", deps)) - {PACKAGE})
    return [PACKAGE, *(_installed(target, *names) if names else [])]  # no names: dpkg-query would list all


def official_release(target: Device) -> str | None:
    """The kernel release the installed official package provides, read from
    its files (/lib/modules/<release>/); None when it is not installed."""
    packages = official_packages(target)
    if not packages:
        return None
    files = target.t.run(target.dpkg_query("-L", *packages)).stdout
    found = sorted({m[1] for m in re.finditer(r"^/(?:usr/)?lib/modules/([^/\s]+)/", files, re.M)})
    return found[0] if len(found) == 1 else None


class OfficialPayload(PiPayload):
    tools = (*PiPayload.tools, "apt-get", "dpkg", "dpkg-query")

    def __init__(self) -> None:
        super().__init__()
        self.expect = Expect(what=PACKAGE)
        self.new_packages: list[str] = []

    def check(self, target: Device, f: DeviceFacts) -> None:
        name = target.name
        model = model_for_dt(f.model) if f.model else None
        if model is None or model.arm64 not in ("yes", "only"):
            raise UserError(f"{name} is a '{f.model or 'board without a device-tree model'}': Raspberry Pi's RT "
                            f"kernel ({IMAGE}) is 64-bit and runs on the Pi 3, 3+, 4, 400, Zero 2 W, CM3, CM4 and "
                            "Pi 5 family; build a kernel for this board with `rtforge kernel build` instead")
        if not target.t.which("apt-get"):
            raise UserError(f"{name} has no apt-get: --official installs Raspberry Pi OS's {PACKAGE} with apt")
        self.before_packages = set(official_packages(target))
        running = official_release(target)
        if running and running == f.release:
            raise UserError(f"{name} runs Raspberry Pi's RT kernel {running} already")
        target.apt_get()  # refuses a target whose apt would change another system

    def install(self, steps: Steps) -> None:
        target = self.mech.target
        t = target.t
        steps.run("update the package lists",
                  lambda: t.run(target.apt_get("update"), sudo=True, check=True, timeout=APT_TIMEOUT_S,
                                step="apt-get update"))

        def purge():
            new = [p for p in official_packages(target) if p not in self.before_packages] or self.new_packages
            if new:
                t.run(target.apt_get("purge", *new), sudo=True, check=True, timeout=APT_TIMEOUT_S, step="cleanup")

        def install():
            t.run(target.apt_get("install", "--no-install-recommends", PACKAGE), sudo=True, check=True,
                  timeout=APT_TIMEOUT_S, step=f"apt-get install {PACKAGE}")
            self.new_packages = [p for p in official_packages(target) if p not in self.before_packages]
        steps.run(f"install {PACKAGE}", install, purge, partial=True)
        release = official_release(target)
        if release is None:
            raise UserError(f"{PACKAGE} is installed on {target.name}, but its files name no single kernel "
                            "release (/lib/modules/<release>/): it is not the package rtforge knows")
        if not t.exists(self.mech.boot(IMAGE)):
            raise UserError(f"installing {PACKAGE} put no {IMAGE} on the boot partition of {target.name}: "
                            "is Raspberry Pi OS's raspi-firmware package (its kernel hook) installed?")
        config = target.path(f"/boot/config-{release}")
        # The package's own .config says what uname -v will show; Raspberry
        # Pi documents the package as the PREEMPT_RT flavour when it has none.
        marker = uname_v_marker(t.read_text(config)) if t.exists(config) else "PREEMPT_RT"
        if marker is None:
            raise UserError(f"{config} on {target.name} has no CONFIG_PREEMPT_RT=y: {PACKAGE} there is not an "
                            "RT kernel, so nothing was rebooted")
        if release == self.mech.facts.release:
            raise UserError(f"{target.name} runs {release} already")
        self.has_initramfs = t.exists(self.mech.boot(INITRAMFS))
        self.expect = Expect(what=release, release=release, marker=marker)

    def block_lines(self) -> list[str]:
        # An initramfs the package's hooks made is loaded by name; without
        # one, auto_initramfs must not look for it (and bootcheck would say so).
        initramfs = f"initramfs {INITRAMFS} followkernel" if self.has_initramfs else "auto_initramfs=0"
        return [f"kernel={IMAGE}", "arm_64bit=1", initramfs]

    def block_label(self) -> str:
        return f"{self.expect.what} ({PACKAGE})"

    def wrong_choice(self, choice: BootChoice) -> str | None:
        return None if choice.kernel == IMAGE else f"it would load kernel {choice.kernel}, not {IMAGE}"

    def removed(self) -> str:
        if self.new_packages:
            return f"{' and '.join(self.new_packages)} {'was' if len(self.new_packages) == 1 else 'were'} removed"
        return f"{PACKAGE} stays installed (it was before)"

    def left_after_not_back(self) -> str:
        return f"; {PACKAGE} stays installed for inspection"


def deploy_official(target: Device, *, timeout_s: float = 300, on_step: Callable[[str], None] | None = None,
                    on_wait: Callable[[float], None] | None = None) -> DeployResult:
    """Install Raspberry Pi's RT kernel package, try it once, keep it when it verifies."""
    return try_once(PiTryboot(target, OfficialPayload(), timeout_s=timeout_s, on_step=on_step, on_wait=on_wait))
