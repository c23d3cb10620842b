"""What kernel a board runs, read through a Transport in one round trip:
its release and `uname -v`, its machine and model, its configuration
(/proc/config.gz, else /boot/config-<release>), the package that installed it
(dpkg: name, version, source package) and the newest entry of that
package's changelog (/usr/share/doc/<package>/changelog.Debian.gz), where
Raspberry Pi OS and Debian say what the kernel was built from.

The board is read by the one facts reader's kernel section
(device/transport/facts.py), below a root: "" on a real board, a copy of a
board's files for --sysroot and the tests (dpkg-query reads that copy's dpkg
database with --admindir).  What a board answers is data, never code
(architecture rule 12): every item is read bounded and regular-only there,
the release must be a plain name before it is used in a path on the board
(there and here), and the changelog is only searched for the shapes of a
commit hash, a tag or a branch.

    read_running(transport, root="") -> RunningKernel
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from ..device.transport import facts
from ..device.transport.transport import Transport
from ..errors import UserError
from .kconfig import parse_config
from .sources import KernelVersion

READ_TIMEOUT_S = 90     # the section reads a few files and asks dpkg-query twice: seconds on a Pi Zero


@dataclass(frozen=True)
class ChangelogRef:
    kind: str        # commit | tag | branch | short-commit
    value: str
    line: str        # the changelog line it was found on


@dataclass(frozen=True)
class RunningConfig:
    """A running kernel's configuration as read: where, its text, its options."""
    where: str                      # "<host>'s /proc/config.gz" or "<host>'s /boot/config-<release>"
    text: str
    options: dict[str, str]


@dataclass
class RunningKernel:
    host: str                       # where it was read: the transport's name, and the root
    release: str
    uname_v: str
    machine: str                    # uname -m
    model: str = ""                 # /proc/device-tree/model ("" off a Pi)
    os_name: str = ""               # /etc/os-release PRETTY_NAME
    config: dict[str, str] | None = None
    config_text: str | None = None
    config_from: str | None = None  # /proc/config.gz or /boot/config-<release>
    package: str | None = None      # the dpkg package that installed the kernel
    package_version: str | None = None
    source_package: str | None = None
    changelog_head: str = ""        # the newest changelog entry
    refs: list[ChangelogRef] = field(default_factory=list)

    @property
    def version(self) -> KernelVersion | None:
        m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", self.release)
        return KernelVersion(int(m[1]), int(m[2]), int(m[3] or 0)) if m else None

    @property
    def configuration(self) -> RunningConfig | None:
        """Its configuration, or None when none was read: read_running sets
        config, config_text and config_from together or not at all."""
        if self.config is None or self.config_text is None or self.config_from is None:
            return None
        return RunningConfig(f"{self.host}'s {self.config_from}", self.config_text, self.config)

    def to_dict(self) -> dict:
        return {"host": self.host, "release": self.release, "uname_v": self.uname_v, "machine": self.machine,
                "model": self.model, "os": self.os_name, "config_from": self.config_from, "package": self.package,
                "package_version": self.package_version, "source_package": self.source_package,
                "changelog_refs": [vars(r) for r in self.refs]}


_REF_SHAPES = [
    ("commit", re.compile(r"\b([0-9a-f]{40})\b")),
    ("tag", re.compile(r"\b(stable_\d{8}|raspberrypi-kernel_1\.\d{8}-\d+|v\d+\.\d+(?:\.\d+)?)\b")),
    ("branch", re.compile(r"\b(rpi-\d+\.\d+\.y)\b")),
    ("short-commit", re.compile(r"\bcommit\s+([0-9a-f]{7,39})\b", re.IGNORECASE)),
]


def changelog_refs(head: str) -> list[ChangelogRef]:
    """Commit hashes, raspberrypi/linux tags and branches named in a
    changelog entry, in the order of the shapes above (the most exact first)."""
    found: list[ChangelogRef] = []
    for kind, shape in _REF_SHAPES:
        for line in head.splitlines():
            for m in shape.finditer(line):
                ref = ChangelogRef(kind, m[1], line.strip()[:200])
                if ref.value not in {r.value for r in found}:
                    found.append(ref)
    return found


def newest_entry(changelog: str) -> str:
    """The first entry of a Debian changelog: its header line to its ' -- ' trailer."""
    lines = changelog.splitlines()
    out = []
    for line in lines:
        out.append(line)
        if line.startswith(" -- "):
            break
    return "\n".join(out)


def _machine_from_config(config: dict[str, str] | None) -> str:
    if not config:
        return ""
    if config.get("ARM64") == "y":
        return "aarch64"
    if config.get("X86_64") == "y":
        return "x86_64"
    if config.get("ARM") == "y":
        return "armv6l" if config.get("CPU_V6") == "y" or config.get("CPU_V6K") == "y" else "armv7l"
    return ""


def read_running(transport: Transport, root: str = "", host: str | None = None) -> RunningKernel:
    """The running kernel of the transport's machine (or of the copy of a
    board's files below root on it)."""
    where = host or transport.name
    try:
        proc = facts.run_sections(transport, ("kernel",), root, check=False, timeout=READ_TIMEOUT_S,
                                  step="reading the running kernel")
    except subprocess.TimeoutExpired:
        raise UserError(f"reading the running kernel of {where} took more than {READ_TIMEOUT_S} s: check that "
                        "its files (or the --sysroot copy) are regular files and that dpkg-query answers") from None
    if proc.returncode:
        raise UserError(f"could not read the running kernel of {where}: "
                        f"{(proc.stderr.strip().splitlines() or [f'exit status {proc.returncode}'])[-1]}")
    board = facts.kernel_from_blocks(facts.blocks(proc.stdout))
    release = board.release
    if not release:
        below = f" below {root}" if root else ""
        raise UserError(f"{where} has no /proc/sys/kernel/osrelease{below}: not a running Linux (or not its /proc)")
    if not re.fullmatch(r"[A-Za-z0-9._+~-]{1,128}", release) or release.startswith("."):
        raise UserError(f"{where} reports a kernel release rtforge cannot use as a name: {release[:80]!r}")
    config_text, config_from = None, None
    if board.config_gz:
        config_text, config_from = board.config_gz, "/proc/config.gz"
    elif board.boot_config:
        config_text, config_from = board.boot_config, f"/boot/config-{release}"
    config = parse_config(config_text) if config_text else None
    if config is not None and not config:
        config, config_text, config_from = None, None, None      # not a kernel configuration at all
    k = RunningKernel(host=where + (f" (below {root})" if root else ""), release=release, uname_v=board.version,
                      machine=board.machine or board.arch or _machine_from_config(config), model=board.model,
                      os_name=board.os or "", config=config, config_text=config_text, config_from=config_from)
    if board.dpkg:
        k.package, k.package_version = board.dpkg[0], board.dpkg[1]
        k.source_package = board.dpkg[2] or board.dpkg[0]
        k.changelog_head = newest_entry(board.changelog)
        k.refs = changelog_refs(k.changelog_head)
    return k
