"""Two firmware models, one documentation: rtforge's (device/firmware/bootcfg, used by
bootcheck and by deploy to check a tryboot.txt) and the deploy tests'
simulated Pi (tests/support/simpi.py, written separately so that a bug in
one cannot make a deploy test agree with it).  Each case below is taken from
the Raspberry Pi documentation -- the section is named in a comment -- with
the answer the documentation gives; both models must give it.  A
disagreement fails, and says which side.

Sections (raspberrypi/documentation, computers/config_txt and raspberry-pi):
  [format]   "What is config.txt?": File format (98 characters, '#' comments), include
  [filters]  "Conditional filters": model table, [all], [none], [tryboot], combining
  [boot]     "Boot options": kernel, arm_64bit, cmdline, os_prefix, device_tree
  [tryboot]  "EEPROM boot flow", Fail-safe OS updates: tryboot.txt instead of config.txt
  [ubuntu]   Ubuntu's "Edit the Raspberry Pi boot configuration": a later line
             for a property overrides an earlier one
"""

from __future__ import annotations

import struct

import pytest

from rtforge.device.firmware.bootcfg import resolve

from ...support.simpi import SIM_MODELS, arm64_image, firmware_boot


def zimage() -> bytes:
    h = bytearray(256)
    struct.pack_into("<I", h, 0x24, 0x016F2818)  # 32-bit ARM zImage magic
    return bytes(h)


def boot_tree(root, extra: dict | None = None) -> None:
    """A boot partition with every default kernel, every dtb, cmdline.txt."""
    files = {"cmdline.txt": "console=tty1 root=/dev/mmcblk0p2\n", "overlays/README": "x"}
    for k in ("kernel.img", "kernel7.img", "kernel7l.img"):
        files[k] = zimage()
    for k in ("kernel8.img", "kernel_2712.img"):
        files[k] = arm64_image(k)
    for _, _, _, _, dtb in SIM_MODELS.values():
        files[dtb] = b"\xd0\x0d\xfe\xed"
    files.update(extra or {})
    for name, content in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            continue
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    for name, content in (extra or {}).items():
        if content is None:
            (root / name).unlink(missing_ok=True)


PREFIX = {"rt/kernel8.img": arm64_image("rt"), "rt/bcm2711-rpi-4-b.dtb": b"dtb", "rt/cmdline.txt": "rt\n",
          "rt/overlays/README": "x"}
LONG = "k" * 91  # kernel= plus 91 characters is 98: the rest of the line is ignored

# (section, model, files, tryboot flag, expected kernel, dtb, cmdline file, arm_64bit)
CASES = {
    # [boot] kernel: the Pi 4's default is kernel8.img (arm_64bit defaults to 1 on a Pi 4)
    "pi4 default": ("pi4", {}, False, "kernel8.img", "bcm2711-rpi-4-b.dtb", "cmdline.txt", True),
    # [boot] kernel: ... or kernel7l.img if arm_64bit is set to 0
    "pi4 arm_64bit=0": ("pi4", {"config.txt": "arm_64bit=0\n"}, False, "kernel7l.img", None, None, False),
    # [boot] kernel: kernel7.img on the Pi 3; arm_64bit=1 chooses kernel8.img
    "pi3 default": ("pi3", {}, False, "kernel7.img", "bcm2710-rpi-3-b.dtb", None, False),
    "pi3 arm_64bit=1": ("pi3", {"config.txt": "arm_64bit=1\n"}, False, "kernel8.img", None, None, True),
    # [boot] kernel: kernel.img on the Pi 1 and Zero
    "pi0 default": ("pi0", {}, False, "kernel.img", "bcm2708-rpi-zero.dtb", None, False),
    "pi1 default": ("pi1", {}, False, "kernel.img", "bcm2708-rpi-b-plus.dtb", None, False),
    # [boot] kernel: the Pi 2's default is kernel7.img
    "pi2 default": ("pi2", {}, False, "kernel7.img", "bcm2709-rpi-2-b.dtb", None, False),
    # [boot] kernel: the Pi 5's default is kernel_2712.img, kernel8.img when it is absent
    "pi5 default": ("pi5", {}, False, "kernel_2712.img", "bcm2712-rpi-5-b.dtb", None, True),
    "pi5 without kernel_2712": ("pi5", {"kernel_2712.img": None}, False, "kernel8.img", None, None, True),
    # [boot] kernel: an explicit file name
    "explicit kernel": ("pi4", {"config.txt": "kernel=my.img\n", "my.img": arm64_image("my")}, False, "my.img",
                        None, None, True),
    # [boot] arm_64bit: a known kernel name sets arm_64bit accordingly
    "known name sets 64-bit": ("pi3", {"config.txt": "kernel=kernel8.img\n"}, False, "kernel8.img", None, None, True),
    "known name sets 32-bit": ("pi4", {"config.txt": "kernel=kernel7l.img\n"}, False, "kernel7l.img", None, None,
                               False),
    # [filters] model table: a section for this model applies
    "[pi4] on a pi4": ("pi4", {"config.txt": "[pi4]\nkernel=a.img\n[all]\n", "a.img": arm64_image("a")}, False,
                       "a.img", None, None, None),
    "[pi4] on a pi3": ("pi3", {"config.txt": "[pi4]\nkernel=a.img\n[all]\n", "a.img": b""}, False, "kernel7.img",
                       None, None, None),
    # [filters] a Pi 400 sees [pi4] and [pi400]; a 3B+ sees [pi3]; a Zero 2 W sees [pi0]
    "pi400 sees [pi4]": ("pi400", {"config.txt": "[pi4]\nkernel=a.img\n", "a.img": arm64_image("a")}, False,
                         "a.img", "bcm2711-rpi-400.dtb", None, None),
    "pi3+ sees [pi3]": ("pi3+", {"config.txt": "[pi3]\nkernel=a.img\n", "a.img": zimage()}, False, "a.img",
                        "bcm2710-rpi-3-b-plus.dtb", None, None),
    "pi02 sees [pi0]": ("pi02", {"config.txt": "[pi0]\nkernel=a.img\n", "a.img": zimage()}, False, "a.img",
                        "bcm2710-rpi-zero-2-w.dtb", None, None),
    "cm4 sees [pi4]": ("cm4", {"config.txt": "[pi4]\nkernel=a.img\n", "a.img": arm64_image("a")}, False, "a.img",
                       "bcm2711-rpi-cm4.dtb", None, None),
    # [filters] "[cm1] Compute Module 1 (also sees [pi1] contents)"; "[cm3+] Compute Module 3+
    # (also sees [pi3+] contents)", and [pi3] lists the CM3+; [cm3] is the Compute Module 3 alone
    "cm1 sees [cm1]": ("cm1", {"config.txt": "[cm1]\nkernel=a.img\n", "a.img": zimage()}, False, "a.img",
                       "bcm2708-rpi-cm.dtb", None, None),
    "cm3+ sees [pi3+]": ("cm3+", {"config.txt": "[pi3+]\nkernel=a.img\n", "a.img": zimage()}, False, "a.img",
                         "bcm2710-rpi-cm3.dtb", None, None),
    "cm3+ does not see [cm3]": ("cm3+", {"config.txt": "[cm3]\nkernel=a.img\n", "a.img": zimage()}, False,
                                "kernel7.img", None, None, None),
    "cm3+ sees [cm3+]": ("cm3+", {"config.txt": "[cm3+]\narm_64bit=1\n"}, False, "kernel8.img", None, None, True),
    "pi4 does not see [pi400]": ("pi4", {"config.txt": "[pi400]\nkernel=a.img\n", "a.img": b""}, False,
                                 "kernel8.img", None, None, None),
    # [filters] combining: filters of the same type replace each other
    "[pi3][pi4]": ("pi4", {"config.txt": "[pi3]\n[pi4]\nkernel=a.img\n", "a.img": arm64_image("a")}, False, "a.img",
                   None, None, None),
    "[pi4] then [pi3]": ("pi4", {"config.txt": "[pi4]\n[pi3]\nkernel=a.img\n", "a.img": b""}, False, "kernel8.img",
                         None, None, None),
    # [filters] [all] resets every filter in effect
    "[all] resets": ("pi4", {"config.txt": "[pi3]\narm_64bit=0\n[all]\nkernel=a.img\n", "a.img": arm64_image("a")},
                     False, "a.img", None, None, True),
    # [filters] [none]: what follows applies to no hardware, until [all]
    "[none]": ("pi4", {"config.txt": "[none]\nkernel=a.img\n", "a.img": b""}, False, "kernel8.img", None, None, None),
    "[none] then [all]": ("pi4", {"config.txt": "[none]\nkernel=a.img\n[all]\nkernel=b.img\n",
                                  "b.img": arm64_image("b")}, False, "b.img", None, None, None),
    # [filters] [tryboot] passes only when the tryboot flag is set
    "[tryboot] without the flag": ("pi4", {"config.txt": "[tryboot]\nkernel=t.img\n", "t.img": b""}, False,
                                   "kernel8.img", None, None, None),
    "[tryboot] in tryboot.txt": ("pi4", {"tryboot.txt": "[tryboot]\nkernel=t.img\n", "t.img": arm64_image("t")}, True,
                                 "t.img", None, None, None),
    # [tryboot] the flag makes the firmware read tryboot.txt instead of config.txt
    "tryboot.txt instead": ("pi4", {"config.txt": "kernel=a.img\n", "tryboot.txt": "kernel=b.img\n",
                                    "a.img": arm64_image("a"), "b.img": arm64_image("b")}, True, "b.img", None, None,
                            None),
    "config.txt without the flag": ("pi4", {"config.txt": "kernel=a.img\n", "tryboot.txt": "kernel=b.img\n",
                                            "a.img": arm64_image("a"), "b.img": arm64_image("b")}, False, "a.img",
                                    None, None, None),
    # [boot] os_prefix: prepended to kernel, dtb and cmdline.txt when both kernel and dtb exist under it
    "os_prefix": ("pi4", {"config.txt": "os_prefix=rt/\n", **PREFIX}, False, "rt/kernel8.img",
                  "rt/bcm2711-rpi-4-b.dtb", "rt/cmdline.txt", True),
    "os_prefix without its dtb": ("pi4", {"config.txt": "os_prefix=rt/\n", **PREFIX, "rt/bcm2711-rpi-4-b.dtb": None},
                                  False, "kernel8.img", "bcm2711-rpi-4-b.dtb", "cmdline.txt", None),
    "os_prefix without its kernel": ("pi4", {"config.txt": "os_prefix=rt/\n", **PREFIX, "rt/kernel8.img": None},
                                     False, "kernel8.img", "bcm2711-rpi-4-b.dtb", "cmdline.txt", None),
    # [boot] os_prefix note: a file name starting with '/' bypasses every prefix
    "absolute kernel": ("pi4", {"config.txt": "os_prefix=rt/\nkernel=/kernel8.img\n", **PREFIX}, False,
                        "kernel8.img", "rt/bcm2711-rpi-4-b.dtb", "rt/cmdline.txt", None),
    # [boot] cmdline: another file name, under the prefix like the other OS files
    "cmdline=": ("pi4", {"config.txt": "os_prefix=rt/\ncmdline=c2.txt\n", **PREFIX, "rt/c2.txt": "c2\n"}, False,
                 "rt/kernel8.img", None, "rt/c2.txt", None),
    # [boot] device_tree (named there with kernel, cmdline and os_prefix as OS files): another dtb
    "device_tree=": ("pi4", {"config.txt": "device_tree=my.dtb\n", "my.dtb": b"dtb"}, False, "kernel8.img", "my.dtb",
                     None, None),
    # [format] a comment starts with '#' at the start of a line
    "commented kernel": ("pi4", {"config.txt": "#kernel=a.img\n", "a.img": b""}, False, "kernel8.img", None, None,
                         None),
    # [format] characters past the 98th of a line are ignored
    "long line": ("pi4", {"config.txt": f"kernel={LONG}IGNORED.img\n", LONG: arm64_image("long")}, False, LONG, None,
                  None, None),
    # [format] include inserts the other file's content
    "include": ("pi4", {"config.txt": "include extra.txt\n", "extra.txt": "kernel=e.img\n", "e.img": arm64_image("e")},
                False, "e.img", None, None, None),
    # [ubuntu] a later line for a property overrides an earlier one
    "last line wins": ("pi4", {"config.txt": "kernel=a.img\nkernel=b.img\n", "a.img": b"", "b.img": arm64_image("b")},
                       False, "b.img", None, None, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_firmware_models_follow_the_documentation(tmp_path, case):
    model, files, tryboot, kernel, dtb, cmdline, arm64 = CASES[case]
    boot_tree(tmp_path, files)
    sim = firmware_boot(tmp_path, model, tryboot)
    ours = resolve(tmp_path, model, tryboot=tryboot)
    expected = {"kernel": kernel, "dtb": dtb, "cmdline_file": cmdline, "arm_64bit": arm64}
    got = {"simulation": {"kernel": sim.kernel, "dtb": sim.dtb, "cmdline_file": sim.cmdline_file,
                          "arm_64bit": sim.arm_64bit},
           "bootcfg": {"kernel": ours.kernel, "dtb": ours.dtb, "cmdline_file": ours.cmdline_file,
                       "arm_64bit": ours.arm_64bit}}
    for side, values in got.items():
        for key, want in expected.items():
            if want is not None:
                assert values[key] == want, f"{side} says {key} = {values[key]!r}, the documentation {want!r}"
    assert got["simulation"] == got["bootcfg"], "the two firmware models disagree"


def test_the_cases_cover_every_simulated_model():
    assert {c[0] for c in CASES.values()} == set(SIM_MODELS)
