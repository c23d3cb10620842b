"""Building the probe (and the other small C programs rtforge runs on a
board, e.g. the N-queens benchmark) from the C sources shipped inside the
package: one program per package folder, every .c in it compiled together.

Builds are cached under the XDG cache dir, keyed by a hash of the sources and
flags, so a changed program is rebuilt and an unchanged one costs nothing.
Targets other than this machine get a static binary from Debian's cross
compilers: a board then needs neither a compiler nor matching libraries.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from .. import paths
from ..errors import UserError

CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-pthread"]

# uname -m -> (compiler, Debian package).  ARMv6 (Pi 1, Zero) cannot run
# Debian armhf code (built for ARMv7, Thumb-2), so it gets the armel compiler.
CROSS = {
    "aarch64": ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu libc6-dev-arm64-cross"),
    "armv7l": ("arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf libc6-dev-armhf-cross"),
    "armv6l": ("arm-linux-gnueabi-gcc", "gcc-arm-linux-gnueabi libc6-dev-armel-cross"),
    "x86_64": ("x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu libc6-dev-amd64-cross"),
}


# Per-target flags.  armel defaults to ARMv5TE, which has no 64-bit atomic
# instructions: the probe's 64-bit counters then need libatomic's
# __atomic_*_8 and do not link statically.  The Pi 1's ARM1176 is ARMv6K,
# which has LDREXD/STREXD (in ARM state, not Thumb-1), as the kernel's own
# build for it assumes (-march=armv6k).
TARGET_FLAGS = {"armv6l": ["-march=armv6k", "-marm"]}


def program_sources(folder: str) -> list[Path]:
    """The .c and .h files of the program in package folder `folder`."""
    root = resources.files("rtforge") / folder
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith((".c", ".h")))


def program_hash(folder: str) -> str:
    h = hashlib.sha256(" ".join(CFLAGS).encode() + repr(sorted(TARGET_FLAGS.items())).encode())
    for p in program_sources(folder):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def sources() -> list[Path]:
    return program_sources("probe")


def build_probe(machine: str | None = None, *, static: bool | None = None) -> Path:
    """Path to a probe for `uname -m` == machine (None: this machine)."""
    return build_program("probe", "rtprobe", machine, static=static)


def build_program(folder: str, name: str, machine: str | None = None, *, static: bool | None = None) -> Path:
    """Path to program `name`, built from package folder `folder`, for
    `uname -m` == machine (None: this machine).  static=None links
    statically exactly when cross-building; True also for this machine's
    architecture, for another computer whose libraries may differ."""
    native = machine in (None, platform.machine())
    machine = machine or platform.machine()
    link = ["-static"] if (not native if static is None else static) else []
    if native:
        cc, package = os.environ.get("CC", "cc"), "gcc"
    elif machine in CROSS:
        cc, package = CROSS[machine]
    else:
        raise UserError(f"no cross compiler known for '{machine}': rtforge builds {name} for {', '.join(CROSS)}")
    out = paths.cache_dir() / folder / program_hash(folder) / f"{name}-{machine}{'-static' if link else ''}"
    if out.exists():
        return out
    if not shutil.which(cc):
        raise UserError(f"the C compiler '{cc}' is needed to build {name} for {machine}: apt install {package}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    cmd = [
        cc,
        *CFLAGS,
        *TARGET_FLAGS.get(machine, []),
        *link,
        "-o",
        str(tmp),
        *(str(p) for p in program_sources(folder) if p.suffix == ".c"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        first = "; ".join(proc.stderr.strip().splitlines()[:3])
        raise UserError(f"building {name} with {cc} failed ({first}); is {package} installed?")
    os.replace(tmp, out)  # atomic: a concurrent build never sees half a binary
    return out
