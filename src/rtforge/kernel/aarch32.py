"""A 32-bit ARM kernel on QEMU's raspi3b, raspi3ap and raspi4b.

Their CPUs reset into AArch64 under TCG and `-kernel` would run a zImage as
AArch64 code, so the boot test puts bootinit/aarch32-entry.S in front of the
zImage: a small stand-in for the Pi firmware's 32-bit start (arm_64bit=0),
which returns into the kernel in AArch32 SVC mode and parks the other cores
on their mailboxes for the kernel's bcm2836-smp release (see the .S file
for what it does and how it differs from the firmware).

    needs_entry(arch, machine) -> bool
    wrap(zimage, out) -> out         the stub, then the zImage
"""

from __future__ import annotations

import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from ..errors import UserError

# Machines only qemu-system-aarch64 has (an AArch64 CPU that QEMU cannot
# start in AArch32 with TCG).
AARCH64_MACHINES = frozenset({"raspi3ap", "raspi3b", "raspi4b"})
ASSEMBLER = "aarch64-linux-gnu-gcc"      # its binutils (as, objcopy) come with it
PACKAGE = "gcc-aarch64-linux-gnu"
STUB_SIZE = 32768                         # the .S file's .balign: the zImage starts 32 KiB in


def needs_entry(arch: str, machine: str) -> bool:
    return arch == "arm" and machine in AARCH64_MACHINES


def _stub(work: Path) -> bytes:
    src = Path(str(resources.files("rtforge") / "bootinit" / "aarch32-entry.S"))
    obj, raw = work / "aarch32-entry.o", work / "aarch32-entry.bin"
    for argv in ([ASSEMBLER, "-c", "-o", str(obj), str(src)],
                 ["aarch64-linux-gnu-objcopy", "-O", "binary", "-j", ".text", str(obj), str(raw)]):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True)
        except FileNotFoundError:
            raise UserError(f"{argv[0]} is needed to boot a 32-bit kernel on an AArch64 Pi machine: "
                            f"apt install {PACKAGE}") from None
        if proc.returncode:
            raise UserError(f"assembling the AArch32 entry stub failed ({proc.stderr.strip()[:200]}); "
                            f"is {PACKAGE} installed?")
    data = raw.read_bytes()
    if len(data) != STUB_SIZE:  # a bug in the .S file, not the user's
        raise ValueError(f"aarch32-entry.S assembled to {len(data)} bytes, not {STUB_SIZE}")
    return data


def wrap(zimage: Path, out: Path) -> Path:
    """Write the entry stub followed by the zImage to `out`."""
    with tempfile.TemporaryDirectory(prefix="rtforge-a32-") as d:
        stub = _stub(Path(d))
    out.write_bytes(stub + zimage.read_bytes())
    return out
