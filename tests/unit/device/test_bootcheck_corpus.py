"""bootcheck on config.txt files other people wrote (tests/corpus/configtxt,
copied from the shared corpus: pi-gen across releases, Ubuntu, Berryboot,
Circle, RT kernel projects, a tryboot setup).  Each folder's SOURCES.tsv
states, per model, the kernel and initramfs the Raspberry Pi documentation
says it boots (`right_kernel(docs)`, `right_initramfs`); bootcheck must
give them -- in normal mode, and in tryboot mode where the folder has a
tryboot.txt -- with exactly the warnings listed below and no other.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from rtforge.device.firmware.bootcfg import resolve

CORPUS = Path(__file__).parents[2] / "corpus" / "configtxt"
ROWS = list(csv.DictReader((CORPUS / "SOURCES.tsv").open(), delimiter="\t"))

# The warnings each row must give (a substring each), from the folder's
# notes and the documentation; any other warning is a false one.
BERRYBOOT = ["config.txt:13: initramfs bbloader.img has no load address"]  # Boot options, initramfs: FILE and ADDR
EXPECTED_WARNINGS = {
    **{("berryboot", m): BERRYBOOT for m in ("pi0", "pi2", "pi3", "pi3+", "pi4")},
    ("berryboot", "pi5"): [*BERRYBOOT, "the device tree bcm2712-rpi-5-b.dtb is not on the boot partition"],
    **{("candle-pi6-filter", m): ["config.txt:47: [pi6] is not a documented filter"]
       for m in ("pi0", "pi3", "pi4", "pi5")},
    ("remusmp-rt-pi4", "pi0"): ["config.txt:19: a pi0 cannot run a 64-bit kernel",
                                "auto_initramfs finds no initramfs for kernel8_rt.img",
                                "kernel8_rt.img is a 64-bit kernel (by its name) and a pi0 only runs 32-bit kernels"],
    # a kernel_2712* image is the Pi 5's: a Pi 4 cannot boot it
    ("remusmp-rt-pi5", "pi4"): ["kernel_2712_rt.img is a kernel for the BCM2712 only", "so a pi4 (BCM2711) cannot"],
    ("ubuntu-core20-arm64", "pi0"): ["config.txt:21: a pi0 cannot run a 64-bit kernel"],
    ("ubuntu2004-classic-arm64", "pi02"): ["the default kernel for a pi02 is kernel8.img, which is not on the boot",
                                           "config.txt:14: kernel=uboot_rpi_4.bin is under [pi4]",
                                           "config.txt:18: kernel=uboot_rpi_2.bin is under [pi2]",
                                           "config.txt:21: kernel=uboot_rpi_3.bin is under [pi3]"],
    ("uconsole-cm", "cm3"): ["the default kernel for a cm3 is kernel7.img, which is not on the boot partition"],
}
# In tryboot mode (tryboot.txt), the warnings beyond the normal boot's:
TRYBOOT_WARNINGS = {
    # Boot options, os_prefix: ignored unless the kernel and the dtb exist under it
    ("pitryboot-ubuntu2204-nodtb", "pi4"): ["tryboot.txt:10: os_prefix=tryboot/tryboot/ is ignored because "
                                            "tryboot/tryboot/bcm2711-rpi-4-b.dtb is missing"],
}
# Boot options, arm_64bit note: the 2B rev 1.2 runs a 64-bit kernel, so a
# Pi 2 config with arm_64bit=1 may be warned about the revision -- at most.
MAY_WARN = {"pi2": "runs a 64-bit kernel only if it is the 2B rev 1.2 (BCM2837)"}


def documented(text: str) -> tuple[str | None, str | None]:
    """(normal, tryboot) from a SOURCES cell: "X (note)", "-",
    "normal X / tryboot Y (note)" or "X / Y"."""
    if m := re.match(r"(?:normal )?(\S+) / (?:tryboot )?(\S+)", text):
        return m[1], m[2]
    word = re.sub(r"\s*\(.*$", "", text).strip()
    return (None if word == "-" else word), None


def test_the_corpus_is_complete():
    assert len(ROWS) >= 60 and {r["dir"] for r in ROWS} == {p.name for p in CORPUS.iterdir() if p.is_dir()}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['dir']}-{r['model']}" for r in ROWS])
def test_corpus_boots_the_documented_kernel_without_false_warnings(row):
    boot, model = CORPUS / row["dir"], row["model"]
    kernel, try_kernel = documented(row["right_kernel(docs)"])
    initramfs, try_initramfs = documented(row["right_initramfs"])
    c = resolve(boot, model)
    assert (c.kernel, c.initramfs) == (kernel, initramfs)
    expected = EXPECTED_WARNINGS.get((row["dir"], model), [])
    for want in expected:
        assert any(want in w for w in c.warnings), f"missing warning: {want}\n{c.warnings}"
    allowed = [*expected, *([MAY_WARN[model]] if model in MAY_WARN else [])]
    false = [w for w in c.warnings if not any(a in w for a in allowed)]
    assert false == []
    if (boot / "tryboot.txt").exists():
        t = resolve(boot, model, tryboot=True)
        assert (t.kernel, t.initramfs) == (try_kernel or kernel, try_initramfs or initramfs)
        want = TRYBOOT_WARNINGS.get((row["dir"], model), [])
        new = [w for w in t.warnings if w not in c.warnings]
        assert len(new) == len(want) and all(any(x in w for w in new) for x in want), new
