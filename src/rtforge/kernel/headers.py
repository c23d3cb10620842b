"""The linux-headers package for DKMS: proven to be usable on the board
before a bundle carries it.

An external module (an EtherCAT master, lttng-modules) is built on the board
with `make -C /lib/modules/<release>/build M=...`, which runs the headers'
own build programs (scripts/basic/fixdep, scripts/mod/modpost, ...) there.
Kbuild's bindeb-pkg makes linux-headers-<release>; whether those programs
are built for the board depends on the tree's scripts/package:

  - trees with scripts/package/install-extmod-build that rebuilds the host
    programs with ${CC} when cross-compiling (Debian's 6.12 has it; 6.1's
    builddeb copies scripts/ as built here): the board's CPU;
  - older trees: this machine's CPU, which cannot run on the board.

Kbuild decides; rtforge does not rebuild anything itself.  It reads the
result: the programs' ELF machine in the .deb, and the .deb's
Module.symvers against the build's (the CRCs a module is checked against
when CONFIG_MODVERSIONS is on).  Only headers that pass both go into the
bundle (bundle/headers/); otherwise the build says why there are none.

One more of Kbuild's rules: rebuilt for the board, scripts/sign-file
(CONFIG_MODULE_SIG) links the board's libcrypto, so the cross build needs
the board architecture's libssl-dev here (mkdebian lists it as a
Build-Depends for that reason).  Without it, bindeb-pkg is run with
Kbuild's own build profile pkg.<source name>.nokernelheaders and the
bundle says why it has no headers.

    headers_rule(tree) -> "target" | "host"
    cannot_build(tree, board, config) -> why not, or None
    check_headers(deb, build, release, arch) -> HeadersCheck
"""

from __future__ import annotations

import hashlib
import io
import struct
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

# ELF e_machine (elf.h) of the CPUs rtforge builds for, by Kbuild ARCH.
ELF_MACHINE = {"arm64": 183, "arm": 40, "x86_64": 62, "riscv": 243}
ELF_NAMES = {183: "aarch64", 40: "arm", 62: "x86-64", 243: "riscv", 3: "i386"}
# Programs every external module build runs (Kbuild's scripts/Makefile.modpost, fixdep on every object).
PROGRAMS = ("scripts/basic/fixdep", "scripts/mod/modpost")


def headers_rule(tree: Path) -> str:
    """'target' when this tree's packaging rebuilds the headers' programs for
    the package's architecture when cross-compiling, else 'host'."""
    script = Path(tree) / "scripts/package/install-extmod-build"
    if script.is_file() and 'HOSTCC="${CC}"' in script.read_text(errors="replace"):
        return "target"
    return "host"


# Debian's architecture for a cross compiler's triplet (its multiarch folder)
DEBARCH = {"aarch64-linux-gnu": "arm64", "arm-linux-gnueabihf": "armhf", "arm-linux-gnueabi": "armel",
           "x86_64-linux-gnu": "amd64"}


def cannot_build(tree: Path, cross_compile: str, config: dict[str, str]) -> str | None:
    """Why Kbuild's headers package cannot be built on this machine, or None."""
    if config.get("MODULES") != "y" or not cross_compile or headers_rule(tree) != "target":
        return None
    triplet = cross_compile.rstrip("-")
    if config.get("MODULE_SIG_FORMAT") == "y" and not Path(f"/usr/lib/{triplet}/libcrypto.so").exists():
        arch = DEBARCH.get(triplet, triplet)
        return (f"its scripts/sign-file (CONFIG_MODULE_SIG) is built for the board and links the board's "
                f"libcrypto, which is not installed here: `dpkg --add-architecture {arch} && apt-get install "
                f"libssl-dev:{arch}` gives the next build its headers")
    return None


def elf_machine(data: bytes) -> int | None:
    if data[:4] != b"\x7fELF" or len(data) < 20:
        return None
    return struct.unpack_from("<H" if data[5] == 1 else ">H", data, 18)[0]


@dataclass
class HeadersCheck:
    ok: bool
    sentence: str                     # what was found, for the user
    programs: dict[str, str]          # program -> its ELF machine name
    symvers_sha256: str | None        # the .deb's Module.symvers
    symvers_symbols: int = 0


def check_headers(deb: Path, build: Path, release: str, arch: str) -> HeadersCheck:
    """Read the .deb: its build programs must be the board's, its
    Module.symvers the build's own."""
    tar_bytes = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    prefix = f"./usr/src/linux-headers-{release}/"
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for member in tar:
            rel = member.name.removeprefix(prefix)
            if member.isfile() and member.name.startswith(prefix) and rel in (*PROGRAMS, "Module.symvers"):
                src = tar.extractfile(member)
                if src is not None:   # a regular file (isfile above) always has its bytes
                    found[rel] = src.read()
    want = ELF_MACHINE.get(arch, -1)   # -1: no ELF machine, so every program is "not the board's"
    programs = {p: ELF_NAMES.get(m, str(m)) if (m := elf_machine(found.get(p, b""))) is not None else "missing"
                for p in PROGRAMS}
    symvers = found.get("Module.symvers")
    digest = hashlib.sha256(symvers).hexdigest() if symvers is not None else None
    own = build / "Module.symvers"
    own_digest = hashlib.sha256(own.read_bytes()).hexdigest() if own.is_file() else None
    count = len(symvers.splitlines()) if symvers else 0
    bad = [f"{p} is {m}" for p, m in programs.items() if m != ELF_NAMES.get(want, "?")]
    if bad:
        return HeadersCheck(False, f"{deb.name} holds build programs that cannot run on the board ({'; '.join(bad)}"
                            f", the board is {ELF_NAMES.get(want, arch)})", programs, digest, count)
    if digest is None or digest != own_digest:
        what = "has no Module.symvers" if digest is None else "has a Module.symvers other than the build's"
        return HeadersCheck(False, f"{deb.name} {what}", programs, digest, count)
    return HeadersCheck(True, f"{deb.name}: build programs for {ELF_NAMES.get(want, arch)}, Module.symvers of "
                        f"the build ({count} symbols)", programs, digest, count)
