"""Building the probe from the C sources shipped inside the package.

Builds are cached under the XDG cache dir, keyed by a hash of the sources and
flags, so a changed probe is rebuilt and an unchanged one costs nothing.
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
# Debian armhf code (built for ARMv7), so it gets the armel compiler.
CROSS = {
    "aarch64": ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu libc6-dev-arm64-cross"),
    "armv7l": ("arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf libc6-dev-armhf-cross"),
    "armv6l": ("arm-linux-gnueabi-gcc", "gcc-arm-linux-gnueabi libc6-dev-armel-cross"),
    "x86_64": ("x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu libc6-dev-amd64-cross"),
}


def sources() -> list[Path]:
    root = resources.files("rtforge") / "probe"
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith((".c", ".h")))


def source_hash() -> str:
    h = hashlib.sha256(" ".join(CFLAGS).encode())
    for p in sources():
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def build_probe(machine: str | None = None) -> Path:
    """Path to a probe for `uname -m` == machine (None: this machine)."""
    native = machine in (None, platform.machine())
    machine = machine or platform.machine()
    if native:
        cc, package, static = os.environ.get("CC", "cc"), "gcc", []
    elif machine in CROSS:
        (cc, package), static = CROSS[machine], ["-static"]
    else:
        raise UserError(f"no cross compiler known for '{machine}': rtforge builds the probe for {', '.join(CROSS)}")
    out = paths.cache_dir() / "probe" / source_hash() / f"rtprobe-{machine}{'-static' if static else ''}"
    if out.exists():
        return out
    if not shutil.which(cc):
        raise UserError(f"the C compiler '{cc}' is needed to build the probe for {machine}: apt install {package}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    cmd = [cc, *CFLAGS, *static, "-o", str(tmp), *(str(p) for p in sources() if p.suffix == ".c")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        first = "; ".join(proc.stderr.strip().splitlines()[:3])
        raise UserError(f"building the probe with {cc} failed ({first}); is {package} installed?")
    os.replace(tmp, out)  # atomic: a concurrent build never sees half a binary
    return out
