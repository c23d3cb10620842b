"""SIMULATION of a Raspberry Pi's firmware and reboots -- the one thing that
cannot exist on this machine.  Kept small on purpose.

Everything else about the simulated board is real: its files are a tree in a
temporary directory, reached by rtforge over the real loopback sshd (and its
packages are installed there by the real apt and dpkg).  What boots after a
reboot is decided by this module's own small firmware resolver, written from
the Raspberry Pi documentation and deliberately *not* rtforge's model
(rtforge.device.firmware.bootcfg / bootparse): deploy checks its tryboot.txt with that
model, so a bug in it must not be able to make both sides agree.  The two are
compared on documented cases in tests/unit/device/test_firmware_crosscheck.py.

Documentation sections cited below (raspberrypi/documentation, computers):
  [format]   config_txt "What is config.txt?", File format and include
  [filters]  config_txt "Conditional filters" (model table, [all], [none], [tryboot])
  [boot]     config_txt "Boot options": kernel, arm_64bit, cmdline, os_prefix
  [tryboot]  raspberry-pi "EEPROM boot flow", Fail-safe OS updates (tryboot)

Each kernel image is recognised by its sha256; the test says how each kernel
behaves: boots, hangs or panics (and which command-line words make it panic).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path

from rtforge.device.deploy.manifest import write_manifest
from rtforge.device.transport.device import Device
from rtforge.device.transport.transport import ConnectionLost

ARM64_MAGIC_AT = 0x38  # arm64 Image header: "ARM\x64" at 0x38 (Linux Documentation/arch/arm64/booting.rst)
LINE_LIMIT = 98        # [format]: characters past the 98th are ignored

# [filters] model table and [boot] kernel / arm_64bit: the filters each
# board passes, its default 32-bit kernel, its 64-bit kernels in the order
# tried, whether arm_64bit defaults to 1, the dtb (raspberrypi/linux names).
SIM_MODELS = {
    "pi0": ({"pi0"}, "kernel.img", [], False, "bcm2708-rpi-zero.dtb"),
    "pi1": ({"pi1"}, "kernel.img", [], False, "bcm2708-rpi-b-plus.dtb"),
    "cm1": ({"pi1", "cm1"}, "kernel.img", [], False, "bcm2708-rpi-cm.dtb"),
    "pi2": ({"pi2"}, "kernel7.img", ["kernel8.img"], False, "bcm2709-rpi-2-b.dtb"),
    "pi3": ({"pi3"}, "kernel7.img", ["kernel8.img"], False, "bcm2710-rpi-3-b.dtb"),
    "pi3+": ({"pi3", "pi3+"}, "kernel7.img", ["kernel8.img"], False, "bcm2710-rpi-3-b-plus.dtb"),
    # "[cm3+] Compute Module 3+ (also sees [pi3+] contents)"; [pi3] lists the CM3+; the CM3's dtb
    "cm3+": ({"pi3", "pi3+", "cm3+"}, "kernel7.img", ["kernel8.img"], False, "bcm2710-rpi-cm3.dtb"),
    "pi02": ({"pi0", "pi0w", "pi02"}, "kernel7.img", ["kernel8.img"], False, "bcm2710-rpi-zero-2-w.dtb"),
    "pi4": ({"pi4"}, "kernel7l.img", ["kernel8.img"], True, "bcm2711-rpi-4-b.dtb"),
    "pi400": ({"pi4", "pi400"}, "kernel7l.img", ["kernel8.img"], True, "bcm2711-rpi-400.dtb"),
    "cm4": ({"pi4", "cm4"}, "kernel7l.img", ["kernel8.img"], True, "bcm2711-rpi-cm4.dtb"),
    "pi5": ({"pi5"}, None, ["kernel_2712.img", "kernel8.img"], True, "bcm2712-rpi-5-b.dtb"),
}
MODEL_FILTERS = {"pi1", "pi2", "pi3", "pi3+", "pi4", "pi5", "pi400", "pi500", "pi0", "pi0w", "pi02",
                 "cm0", "cm1", "cm3", "cm3+", "cm4", "cm4s", "cm5"}
# [boot] arm_64bit: "if the name given in an explicit kernel option matches
# one of the known kernels then arm_64bit will be set accordingly".
KNOWN_64 = {"kernel.img": False, "kernel7.img": False, "kernel7l.img": False, "kernel8.img": True,
            "kernel_2712.img": True}


@dataclass
class FirmwareChoice:
    kernel: str | None      # path on the boot partition
    dtb: str
    cmdline_file: str
    arm_64bit: bool
    os_prefix: str


@dataclass
class _Filters:
    """The conditional filters in force at a point of a config.txt file."""

    model: str | None = None
    none: bool = False
    try_only: bool = False
    unknown: bool = False

    def section(self, line: str) -> None:
        """A line of [filters]: each may set or reset what follows."""
        for tok in (t.strip() for t in line.strip("[]").split("][")):
            if tok == "all":                      # [all] resets every filter
                self.model, self.none, self.try_only, self.unknown = None, False, False, False
            elif tok == "none":                   # nothing applies until [all]
                self.none = True
            elif tok == "tryboot":                # only with the tryboot flag
                self.try_only = True
            elif tok in MODEL_FILTERS:            # replaces the earlier model filter
                self.model = tok
            else:                                 # EDID, GPIO, serial, typos: not knowable here
                self.unknown = True

    def apply(self, passes: set[str], tryboot: bool) -> bool:
        return not self.none and not self.unknown and (not self.try_only or tryboot) \
            and (self.model is None or self.model in passes)


def _settings(boot: Path, name: str, model: str, tryboot: bool, depth: int = 0) -> list[tuple[str, str]]:
    """(key, value) lines that apply, in file order ([format], [filters])."""
    f = boot / name
    if not f.is_file() or depth > 8:
        return []
    passes = SIM_MODELS[model][0]
    out: list[tuple[str, str]] = []
    filters = _Filters()
    for raw in f.read_bytes().decode("latin-1").split("\n"):
        line = raw.rstrip("\r")[:LINE_LIMIT].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            filters.section(line)
        elif filters.apply(passes, tryboot):
            word = line.split(None, 1)
            if word[0] == "include" and len(word) == 2:   # [format] include inserts the file
                out += _settings(boot, word[1].strip(), model, tryboot, depth + 1)
            elif "=" in line:
                key, value = line.split("=", 1)           # no spaces around '=' are allowed
                out.append((key, value))
    return out


def firmware_boot(boot: Path, model: str, tryboot: bool) -> FirmwareChoice:
    """What the simulated firmware loads from the boot partition `boot`."""
    _, kernel32, kernel64, arm64_default, dtb_default = SIM_MODELS[model]
    # [tryboot]: with the flag set the firmware reads tryboot.txt instead of config.txt
    settings = dict(_settings(boot, "tryboot.txt" if tryboot else "config.txt", model, tryboot))  # last wins
    arm64 = arm64_default if kernel32 else True
    if "arm_64bit" in settings and kernel32:
        arm64 = settings["arm_64bit"].strip() not in ("0", "")
    elif settings.get("kernel") in KNOWN_64 and kernel32 and kernel64:
        arm64 = KNOWN_64[settings["kernel"]]
    names = [settings["kernel"]] if settings.get("kernel") else (kernel64 if arm64 and kernel64 else [kernel32])
    dtb = settings.get("device_tree") or dtb_default
    cmdline = settings.get("cmdline") or "cmdline.txt"

    def under(prefix: str, name: str) -> str:         # a leading '/' bypasses every prefix
        return name.lstrip("/") if name.startswith("/") else prefix + name

    def first(prefix: str) -> str | None:
        return next((under(prefix, n) for n in names if (boot / under(prefix, n)).is_file()), None)

    prefix = settings.get("os_prefix", "")
    # [boot] os_prefix: ignored unless the kernel and the .dtb exist under it
    if prefix and not (first(prefix) and (boot / under(prefix, dtb)).is_file()):
        prefix = ""
    return FirmwareChoice(first(prefix) or under(prefix, names[0]), under(prefix, dtb), under(prefix, cmdline),
                          arm64, prefix)


def is_arm64_image(data: bytes) -> bool:
    return data[ARM64_MAGIC_AT:ARM64_MAGIC_AT + 4] == b"ARM\x64"


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
    panics_with: tuple = ()        # command-line words this kernel panics with
    config: str | None = None      # its /proc/config.gz (CONFIG_IKCONFIG_PROC), None: none


OLD = SimKernel("6.6.51+rpt-rpi-v8", "#1 SMP PREEMPT Debian 1:6.6.51-1+rpt3 (2024-10-08)")
CMDLINE = "console=serial0,115200 console=tty1 root=PARTUUID=4e639091-02 rootfstype=ext4 fsck.repair=yes rootwait"
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
        boot / "cmdline.txt": (CMDLINE + "\n").encode(),
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


def make_bundle(dest: Path, release: str = "6.12.0-rt5-rtforge", tag: str = "rt kernel",
                headers: Path | None = None) -> tuple[Path, str]:
    """A bundle as `rtforge kernel build` makes one for pi4-64 (with a
    linux-headers .deb: its headers/); returns (dir, image sha256)."""
    image = arm64_image(tag)
    files = {
        "boot/kernel8-rtforge.img": image,
        "boot/bcm2711-rpi-4-b.dtb": b"\xd0\x0d\xfe\xed rt dtb",
        "boot/overlays/README": b"overlays",
        "boot/overlays/vc4-kms-v3d.dtbo": b"\xd0\x0d\xfe\xed rt overlay",
        f"lib/modules/{release}/modules.dep": b"",
        f"lib/modules/{release}/kernel/drivers/rtforge-test.ko": b"\x7fELF module",
    }
    if headers is not None:
        files[f"headers/{headers.name}"] = headers.read_bytes()
    for rel, data in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    extra = {"headers": {"deb": f"headers/{headers.name}", "package": f"linux-headers-{release}"}} if headers else {}
    write_manifest(dest, board="pi4-64", arch="arm64", machines=["aarch64"],
                   models=["Raspberry Pi 4 Model B", "Raspberry Pi 400", "Raspberry Pi Compute Module 4"],
                   kernelrelease=release, image="kernel8-rtforge.img", uname_v_marker="PREEMPT_RT", **extra)
    return dest, hashlib.sha256(image).hexdigest()


class SimulatedPi(Device):
    reboot_tools = ()          # the firmware and its reboots are simulated here

    def __init__(self, transport, root: Path, kernels: dict[str, SimKernel], model: str = "pi4"):
        super().__init__(transport, str(root))
        self.tree = root
        self.kernels = kernels
        self.model = model
        self.up = True
        self._boot(tryboot=False)

    # -- what the firmware does ------------------------------------------------
    def _boot(self, tryboot: bool) -> None:
        boot = self.tree / "boot/firmware"
        choice = firmware_boot(boot, self.model, tryboot)
        image = (boot / choice.kernel).read_bytes() if choice.kernel and (boot / choice.kernel).is_file() else b""
        cmdline_file = boot / choice.cmdline_file
        cmdline = cmdline_file.read_text().split("\n")[0].strip() if cmdline_file.is_file() else ""
        kernel = self.kernels.get(hashlib.sha256(image).hexdigest())
        boots = kernel is not None and kernel.behaviour != "panics" and (boot / choice.dtb).is_file() \
            and is_arm64_image(image) == choice.arm_64bit and not set(kernel.panics_with) & set(cmdline.split())
        if not boots:
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
        (self.tree / "proc/cmdline").write_text(cmdline + "\n")
        proc_config = self.tree / "proc/config.gz"
        if kernel.config is None:
            proc_config.unlink(missing_ok=True)
        else:
            proc_config.write_bytes(gzip.compress(kernel.config.encode()))
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
