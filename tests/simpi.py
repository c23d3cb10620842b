"""SIMULATION of a Raspberry Pi's firmware and reboots -- the one thing that
cannot exist on this machine.  Kept small on purpose.

Everything else about the simulated board is real: its files are a tree in a
temporary directory, reached by rtforge over the real loopback sshd, and what
boots after a reboot is decided by rtforge's firmware model (bootcfg) on the
files that are really there.  Each kernel image is recognised by its sha256;
the test says how each kernel behaves: boots, hangs or panics.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path

from rtforge.target.board import Board
from rtforge.target.bootcfg import DirFiles, resolve
from rtforge.target.bundle import write_manifest
from rtforge.target.transport import ConnectionLost

ARM64_MAGIC_AT = 0x38  # arm64 Image header: "ARM\x64" at 0x38


def arm64_image(tag: str, size: int = 4096) -> bytes:
    data = bytearray(size)
    data[ARM64_MAGIC_AT:ARM64_MAGIC_AT + 4] = b"ARM\x64"
    data[0x100:0x100 + len(tag)] = tag.encode()
    return bytes(data)


@dataclass
class SimKernel:
    release: str
    version: str
    behaviour: str = "boots"       # boots | hangs | panics
    realtime: bool = False         # has /sys/kernel/realtime (RT-patched kernels)


OLD = SimKernel("6.6.51+rpt-rpi-v8", "#1 SMP PREEMPT Debian 1:6.6.51-1+rpt3 (2024-10-08)")
CONFIG_TXT = """\
# For more options and information see
# http://rptl.io/configtxt
dtparam=audio=on
camera_auto_detect=1
display_auto_detect=1
auto_initramfs=1
dtoverlay=vc4-kms-v3d
max_framebuffers=2
disable_fw_kms_setup=1
arm_64bit=1
disable_overscan=1
arm_boost=1

[cm4]
otg_mode=1

[all]
"""


def make_pi4_tree(root: Path) -> dict[str, SimKernel]:
    """A Pi 4 with Raspberry Pi OS bookworm 64-bit; returns {sha256: kernel}."""
    boot = root / "boot" / "firmware"
    (boot / "overlays").mkdir(parents=True)
    old_image = arm64_image("stock kernel")
    files = {
        boot / "config.txt": CONFIG_TXT.encode(),
        boot / "cmdline.txt": b"console=serial0,115200 console=tty1 root=PARTUUID=4e639091-02 rootfstype=ext4 fsck.repair=yes rootwait\n",
        boot / "kernel8.img": old_image,
        boot / "initramfs8": b"initramfs",
        boot / "bcm2711-rpi-4-b.dtb": b"\xd0\x0d\xfe\xed stock dtb",
        boot / "overlays" / "README": b"overlays",
        boot / "overlays" / "vc4-kms-v3d.dtbo": b"\xd0\x0d\xfe\xed overlay",
        root / "proc/device-tree/model": b"Raspberry Pi 4 Model B Rev 1.4\0",
        root / "proc/device-tree/chosen/bootloader/tryboot": b"\0\0\0\0",
        root / f"lib/modules/{OLD.release}/modules.dep": b"",
        root / "etc/os-release": b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "var/tmp").mkdir(parents=True)
    return {hashlib.sha256(old_image).hexdigest(): OLD}


def make_bundle(dest: Path, release: str = "6.12.0-rt5-rtforge", tag: str = "rt kernel") -> tuple[Path, str]:
    """A bundle as `rtforge kernel build` makes one for pi4-64; returns (dir, image sha256)."""
    image = arm64_image(tag)
    files = {
        "boot/kernel8-rtforge.img": image,
        "boot/bcm2711-rpi-4-b.dtb": b"\xd0\x0d\xfe\xed rt dtb",
        "boot/overlays/README": b"overlays",
        "boot/overlays/vc4-kms-v3d.dtbo": b"\xd0\x0d\xfe\xed rt overlay",
        f"lib/modules/{release}/modules.dep": b"",
        f"lib/modules/{release}/kernel/drivers/rtforge-test.ko": b"\x7fELF module",
    }
    for rel, data in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    write_manifest(dest, board="pi4-64", arch="arm64", machines=["aarch64"],
                   models=["Raspberry Pi 4 Model B", "Raspberry Pi 400", "Raspberry Pi Compute Module 4"],
                   kernelrelease=release, image="kernel8-rtforge.img", uname_v_marker="PREEMPT_RT")
    return dest, hashlib.sha256(image).hexdigest()


class SimulatedPi(Board):
    def __init__(self, transport, root: Path, kernels: dict[str, SimKernel], model: str = "pi4"):
        super().__init__(transport, str(root))
        self.tree = root
        self.kernels = kernels
        self.model = model
        self.up = True
        self._boot(tryboot=False)

    # -- what the firmware does ------------------------------------------------
    def _boot(self, tryboot: bool) -> None:
        choice = resolve(DirFiles(self.tree / "boot/firmware"), self.model, tryboot)
        image = (self.tree / "boot/firmware" / choice.kernel).read_bytes() if choice.kernel else b""
        kernel = self.kernels.get(hashlib.sha256(image).hexdigest())
        if kernel is None or kernel.behaviour == "panics":
            if tryboot:  # the flag was cleared before the kernel started: the reset reads config.txt
                return self._boot(tryboot=False)
            self.up = False  # a boot loop
            return
        self.boot_state = (kernel, tryboot, str(uuid.uuid4()))
        self.up = kernel.behaviour != "hangs"
        rt = self.tree / "sys/kernel/realtime"
        rt.parent.mkdir(parents=True, exist_ok=True)
        if kernel.realtime:
            rt.write_text("1\n")
        elif rt.exists():
            rt.unlink()
        (self.tree / "proc/device-tree/chosen/bootloader/tryboot").write_bytes(int(tryboot).to_bytes(4, "big"))

    def power_cycle(self) -> None:
        self._boot(tryboot=False)

    # -- what rtforge reads and does ---------------------------------------------
    def _require_up(self) -> None:
        if not self.up:
            raise ConnectionLost(f"lost the connection to {self.name}: Connection timed out (simulated board is down)")

    def facts(self):
        """The real facts of the tree, with the simulated kernel's uname and boot id."""
        self._require_up()
        kernel = self.boot_state[0]
        return dataclasses.replace(super().facts(), machine="aarch64", release=kernel.release,
                                   version=kernel.version, boot_id=self.boot_state[2])

    def boot_id(self) -> str:
        self._require_up()
        return self.boot_state[2]

    def reboot(self, tryboot: bool) -> None:
        self._boot(tryboot)

    def wait_back(self, old_boot_id, timeout_s, progress=None, poll_s=2.0) -> bool:
        if progress:
            progress(0.0)
        return self.up and self.boot_state[2] != old_boot_id

    @property
    def running(self) -> str | None:
        return self.boot_state[0].release if self.up else None
