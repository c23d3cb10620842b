"""Running a Pi's programs on this machine with qemu-user, as a given Pi CPU.

A program run directly (`qemu-arm-static -cpu arm1176 prog`) is enough for a
single binary.  A program that starts other ARM programs (/init starting the
probe, a shell running a script) needs the kernel to hand those to qemu-user
too: a binfmt_misc entry.  Registering one globally would change this whole
machine, so the entry goes into a private binfmt_misc instance of a new user
namespace (Linux >= 6.7), with the F flag so the interpreter is found even
inside a chroot; QEMU_CPU picks the CPU for every program started that way.
"""

from __future__ import annotations

import re
import shlex
import struct
import subprocess
from pathlib import Path

# uname -m -> (qemu-user binary, the Debian binfmt description it comes with)
QEMU_USER = {"armv6l": ("qemu-arm-static", "qemu-arm"), "armv7l": ("qemu-arm-static", "qemu-arm"),
             "aarch64": ("qemu-aarch64-static", "qemu-aarch64")}


def qemu_user(machine: str) -> Path:
    return Path("/usr/bin") / QEMU_USER[machine][0]


def binfmt_line(machine: str) -> str:
    """A register line: Debian's own entry for this ELF machine (magic, mask,
    its qemu-user interpreter and flags), under our name, with F (open the
    interpreter now, so a chroot does not hide it).  Debian's interpreter is
    the -binfmt-P name, with which QEMU takes the P flag's argv[0]: a
    multi-call program such as busybox then still sees its applet's name."""
    conf = Path(f"/usr/lib/binfmt.d/{QEMU_USER[machine][1]}.conf").read_text().strip()
    name, kind, offset, magic, mask, interpreter, flags = conf.split(":")[1:8]
    flags = flags if "F" in flags else flags + "F"
    return f":rtforge-{name}:{kind}:{offset}:{magic}:{mask}:{interpreter}:{flags}"


def sandboxed(machine: str, cpu: str, argv: list[str], *, chroot: Path | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    """Run argv in new user, mount and PID namespaces whose own binfmt_misc
    sends every program of this machine to qemu-user as `cpu` (as root of
    the namespace: not root of this machine, so nothing here is touched)."""
    line = binfmt_line(machine)
    run = shlex.join(["chroot", str(chroot), *argv] if chroot else argv)
    script = ("set -e; mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; "
              f"printf '%s' {shlex.quote(line)} > /proc/sys/fs/binfmt_misc/register; "
              f"export QEMU_CPU={shlex.quote(cpu)}; {run}")
    # Not exec: the program must not be PID 1 of its namespace, which ignores
    # signals it has no handler for -- a SIGILL would hang instead of killing
    # it.  (A reboot() from /init still ends the namespace: it kills PID 1.)
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "sh", "-c", script],
                          capture_output=True, text=True, errors="replace", timeout=timeout)


def sandbox_works() -> str | None:
    """None if private binfmt_misc instances work here, else why not."""
    try:
        p = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && "
                            "test -w /proc/sys/fs/binfmt_misc/register"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode:
        return "this kernel has no per-user-namespace binfmt_misc (Linux >= 6.7): " + (
            re.sub(r"\s+", " ", p.stderr.strip()) or f"exit {p.returncode}")
    return None


# e_machine values (elf.h) of the CPUs a Pi has
EM_ARM, EM_AARCH64 = 40, 183


def elf_facts(path: Path) -> tuple[int, bool]:
    """(e_machine, whether it asks for a dynamic loader: a PT_INTERP program
    header) of an ELF file, 32 or 64 bits, either byte order (elf(5))."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF", f"{path} is not an ELF file"
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    machine = struct.unpack_from(end + "H", data, 18)[0]
    if is64:
        (phoff,) = struct.unpack_from(end + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
    else:
        (phoff,) = struct.unpack_from(end + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 0x2A)
    types = [struct.unpack_from(end + "I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return machine, 3 in types  # PT_INTERP
