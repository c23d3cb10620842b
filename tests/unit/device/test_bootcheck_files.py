"""`rtforge bootcheck`: where the files a Pi boots come from -- os_prefix and
overlay_prefix, an explicit or automatic initramfs, the cmdline file.

As in test_bootcheck.py, the firmware is *simulated* by rtforge's model
(rtforge.device.firmware.bootcfg) on real boot-partition trees; the
expected values are written out from the Raspberry Pi documentation
(config.txt: boot options, os_prefix, overlay_prefix), not taken from the
model's tables.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rtforge.device.firmware.bootcfg import resolve

from ...support.bootfiles import CMDLINE, PIOS_CONFIG, arm64_image, warned, write

# --- os_prefix ----------------------------------------------------------------


def rt_prefix(root, **skip) -> None:
    files = {
        "rt/kernel8.img": arm64_image(),
        "rt/bcm2711-rpi-4-b.dtb": b"dtb",
        "rt/cmdline.txt": CMDLINE + " rt",
        "rt/initramfs8": b"i",
        "rt/overlays/README": "x",
    }
    write(root, {k: v for k, v in files.items() if k.split("/")[-1] not in skip.get("without", ())})


def test_os_prefix_applies_to_kernel_dtb_initramfs_cmdline(pios):
    rt_prefix(pios)
    write(pios, {"config.txt": PIOS_CONFIG + "os_prefix=rt/\n"})
    c = resolve(pios, "pi4")
    assert (c.kernel, c.dtb, c.initramfs, c.cmdline_file) == (
        "rt/kernel8.img",
        "rt/bcm2711-rpi-4-b.dtb",
        "rt/initramfs8",
        "rt/cmdline.txt",
    )
    assert c.cmdline == CMDLINE + " rt" and c.warnings == [] and c.os_prefix == "rt/"
    assert c.reasons["kernel"].endswith(", under os_prefix=rt/ (config.txt:20, in [all])")


@pytest.mark.parametrize("missing", ["bcm2711-rpi-4-b.dtb", "kernel8.img"])
def test_os_prefix_ignored_when_kernel_or_dtb_missing_under_it(pios, missing):
    rt_prefix(pios, without=(missing,))
    write(pios, {"config.txt": "os_prefix=rt/\n"})
    c = resolve(pios, "pi4")
    assert (c.kernel, c.dtb, c.cmdline_file, c.os_prefix) == ("kernel8.img", "bcm2711-rpi-4-b.dtb", "cmdline.txt", "")
    assert warned(c, "os_prefix=rt/ is ignored because rt/" + missing, "copy rt/" + missing)


def test_os_prefix_needs_cmdline_and_overlays_readme_under_it(pios):
    rt_prefix(pios, without=("cmdline.txt", "README"))
    write(pios, {"config.txt": "os_prefix=rt/\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "rt/kernel8.img" and c.cmdline is None
    assert warned(c, "rt/cmdline.txt is missing", "copy cmdline.txt there")
    assert warned(c, "rt/overlays/README is missing")


def test_overlay_prefix_goes_under_os_prefix_only_where_its_readme_is(pios):
    """Boot options, overlay_prefix: ${os_prefix}${overlay_prefix} when its README exists, else ${overlay_prefix}."""
    rt_prefix(pios)
    write(pios, {"config.txt": "os_prefix=rt/\noverlay_prefix=dt/\n", "rt/dt/README": "x", "dt/README": "x"})
    c = resolve(pios, "pi4")
    assert c.overlays == "rt/dt/" and not warned(c, "README is missing")
    (pios / "rt" / "dt" / "README").unlink()
    c = resolve(pios, "pi4")
    assert c.overlays == "dt/" and warned(c, "rt/dt/README is missing, so overlays load from the shared dt/")
    write(pios, {"config.txt": "overlay_prefix=dt/\n"})
    assert resolve(pios, "pi4").overlays == "dt/"                     # no os_prefix: the prefix alone


def test_an_overlay_prefix_under_os_prefix_itself_is_not_the_shared_folder():
    """pi-tryboot's tryboot.txt: os_prefix=tryboot/tryboot/ and overlay_prefix=tryboot/tryboot/overlays/.
    The firmware tries tryboot/tryboot/tryboot/tryboot/overlays/README, finds none, and falls back to
    tryboot/tryboot/overlays/ -- the tried kernel's own overlays: no warning about shared ones."""
    boot = Path(__file__).parents[2] / "corpus" / "configtxt" / "pitryboot-ubuntu2204"
    c = resolve(boot, "pi4", tryboot=True)
    assert c.os_prefix == "tryboot/tryboot/" and c.overlays == "tryboot/tryboot/overlays/"
    assert not warned(c, "README is missing")
    assert resolve(boot, "pi4").overlays == "overlays/"


def test_os_prefix_without_trailing_slash(pios):
    rt_prefix(pios)
    write(pios, {"config.txt": "os_prefix=rt\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel8.img" and warned(c, "has no trailing '/'", "write os_prefix=rt/.")


def test_absolute_kernel_path_bypasses_os_prefix(pios):
    rt_prefix(pios)
    write(pios, {"common.img": arm64_image(), "config.txt": "os_prefix=rt/\nkernel=/common.img\n"})
    c = resolve(pios, "pi4")
    assert (c.kernel, c.dtb) == ("common.img", "rt/bcm2711-rpi-4-b.dtb")


def test_device_tree_override(pios):
    write(pios, {"my.dtb": b"d", "config.txt": "device_tree=my.dtb\n"})
    c = resolve(pios, "pi4")
    assert c.dtb == "my.dtb" and c.reasons["dtb"] == "device_tree=my.dtb (config.txt:1)"


# --- initramfs and cmdline ------------------------------------------------------


def test_explicit_initramfs(pios):
    write(pios, {"config.txt": "auto_initramfs=1\ninitramfs initrd.img-rt followkernel\n"})
    c = resolve(pios, "pi4")
    assert c.initramfs == "initrd.img-rt" and warned(c, "initramfs initrd.img-rt is not on the boot partition")
    write(pios, {"initrd.img-rt": b"i", "config.txt": "initramfs initrd.img-rt\n"})
    c = resolve(pios, "pi4")
    assert c.initramfs == "initrd.img-rt" and warned(c, "has no load address", "followkernel")
    write(pios, {"config.txt": "ramfsfile=initrd.img-rt,initramfs8\n"})  # the older two-line form
    c = resolve(pios, "pi4")
    assert (c.initramfs, c.warnings) == ("initrd.img-rt,initramfs8", [])


def test_auto_initramfs_off_and_with_custom_kernel(pios):
    write(pios, {"config.txt": "dtparam=audio=on\n"})
    assert resolve(pios, "pi4").initramfs is None
    write(pios, {"kernel8-rt.img": arm64_image(), "config.txt": "auto_initramfs=1\nkernel=kernel8-rt.img\n"})
    c = resolve(pios, "pi4")
    assert c.initramfs is None and warned(c, "auto_initramfs finds no initramfs for kernel8-rt.img")
    write(pios, {"initramfs8-rt": b"i"})
    c = resolve(pios, "pi4")
    assert c.initramfs == "initramfs8-rt" and warned(c, "older firmware", "add initramfs initramfs8-rt followkernel")


def test_custom_cmdline_file(pios):
    write(pios, {"cmd-rt.txt": CMDLINE + " isolcpus=3\r\n", "config.txt": "cmdline=cmd-rt.txt\n"})
    c = resolve(pios, "pi4")
    assert (c.cmdline_file, c.cmdline, c.warnings) == ("cmd-rt.txt", CMDLINE + " isolcpus=3", [])
    write(pios, {"config.txt": "cmdline=nope.txt\n"})
    assert warned(resolve(pios, "pi4"), "nope.txt is missing")


def test_cmdline_on_several_lines_or_empty(pios):
    write(pios, {"cmdline.txt": "console=tty1\nroot=/dev/mmcblk0p2\n"})
    c = resolve(pios, "pi4")
    assert c.cmdline == "console=tty1" and warned(c, "has 2 lines", "single line")
    write(pios, {"cmdline.txt": "\n"})
    c = resolve(pios, "pi4")
    assert c.cmdline == "" and warned(c, "cmdline.txt is empty")
