"""Boot partitions for the bootcheck tests: kernel images with the real
header kinds, a Raspberry Pi OS config.txt and cmdline.txt, every dtb."""

from __future__ import annotations

import struct
from pathlib import Path

from rtforge.device.deploy.manifest import write_manifest


def arm64_image() -> bytes:
    """The 64-byte arm64 Image header (magic "ARM\\x64" at 0x38) and a body."""
    h = bytearray(64)
    h[0x38:0x3C] = b"ARM\x64"
    return bytes(h) + b"\x00" * 192


def zimage() -> bytes:
    """A 32-bit ARM zImage start: magic 0x016F2818 at offset 0x24."""
    h = bytearray(64)
    struct.pack_into("<I", h, 0x24, 0x016F2818)
    return bytes(h) + b"\x00" * 192


CMDLINE = "console=serial0,115200 console=tty1 root=PARTUUID=4a3e915f-02 rootfstype=ext4 rootwait"
PIOS_CONFIG = """# For more options and information see
# http://rptl.io/configtxt
dtparam=audio=on
camera_auto_detect=1
display_auto_detect=1
# Automatically load initramfs files, if found
auto_initramfs=1
dtoverlay=vc4-kms-v3d
max_framebuffers=2
disable_fw_kms_setup=1
arm_boost=1

[cm4]
otg_mode=1

[cm5]
dtoverlay=dwc2,dr_mode=host

[all]
"""


# The device trees the documented models boot by default (raspberrypi/linux names).
DTBS = ["bcm2708-rpi-zero.dtb", "bcm2708-rpi-zero-w.dtb", "bcm2710-rpi-zero-2-w.dtb", "bcm2708-rpi-b-plus.dtb",
        "bcm2708-rpi-cm.dtb",
        "bcm2709-rpi-2-b.dtb", "bcm2710-rpi-3-b.dtb", "bcm2710-rpi-3-b-plus.dtb", "bcm2710-rpi-cm3.dtb",
        "bcm2711-rpi-4-b.dtb", "bcm2711-rpi-400.dtb", "bcm2711-rpi-cm4.dtb", "bcm2711-rpi-cm4s.dtb",
        "bcm2712-rpi-5-b.dtb", "bcm2712-rpi-500.dtb", "bcm2712-rpi-cm5-cm5io.dtb"]


def write(root, files: dict) -> None:
    for name, content in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def pi_boot_partition(root, extra: dict | None = None):
    """A Raspberry Pi OS (bookworm) boot partition: every standard kernel
    with its real header kind, every initramfs, every dtb, cmdline.txt."""
    files = {"config.txt": PIOS_CONFIG, "cmdline.txt": CMDLINE + "\n", "overlays/README": "overlays\n"}
    for k in ("kernel.img", "kernel7.img", "kernel7l.img"):
        files[k] = zimage()
    for k in ("kernel8.img", "kernel_2712.img"):
        files[k] = arm64_image()
    for i in ("initramfs", "initramfs7", "initramfs7l", "initramfs8", "initramfs_2712"):
        files[i] = b"\x1f\x8b initramfs"
    for dtb in DTBS:
        files[dtb] = b"\xd0\x0d\xfe\xed dtb"
    write(root, {**files, **(extra or {})})
    return root


def warned(choice, *words) -> bool:
    return any(all(w in msg for w in words) for msg in choice.warnings)


def tiny_pi4_bundle(root: Path) -> Path:
    """The smallest valid pi4-64 bundle (a kernel, a dtb, a modules tree and
    the manifest that names them): the base the bundle-safety and fuzz tests
    damage in their own ways."""
    files = {"boot/kernel8-rtforge.img": b"\x00kernel", "boot/bcm2711-rpi-4-b.dtb": b"\xd0\x0d\xfe\xed",
             "lib/modules/6.12.0-rt5/modules.dep": b""}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    write_manifest(root, board="pi4-64", arch="arm64", machines=["aarch64"], models=["Raspberry Pi 4 Model B"],
                   kernelrelease="6.12.0-rt5", image="kernel8-rtforge.img", uname_v_marker="PREEMPT_RT",
                   qemu={"machine": "raspi3b", "cpu": None, "append": None, "dtb": "bcm2711-rpi-4-b.dtb"})
    return root
