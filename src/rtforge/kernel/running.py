"""What kernel a board runs, read through a Transport in one round trip:
its release and `uname -v`, its machine and model, its configuration
(/proc/config.gz, else /boot/config-<release>), the package that installed it
(dpkg: name, version, source package) and the newest entry of that
package's changelog (/usr/share/doc/<package>/changelog.Debian.gz), where
Raspberry Pi OS and Debian say what the kernel was built from.

Files are read below a root: "" on a real board, a copy of a board's files
for --sysroot and the tests (dpkg-query reads that copy's dpkg database with
--admindir).  What a board answers is data, never code (architecture rule
12): every item is read bounded, the release must be a plain name before it
is used in a path on the board, and the changelog is only searched for the
shapes of a commit hash, a tag or a branch.

    read_running(transport, root="") -> RunningKernel
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from ..device.transport.transport import Transport
from ..errors import UserError
from .kconfig import parse_config
from .sources import KernelVersion

CONFIG_MAX = 4 << 20        # a distribution's .config is ~0.3 MB
CHANGELOG_MAX = 64 << 10    # the newest entries are at the top
SMALL_MAX = 4 << 10

# $1 root, $2 small bound, $3 config bound, $4 changelog bound.  Each block
# starts on a line of its own: "@@f PATH" (a file below the root) or
# "@@c NAME" (a command's output).  Every file is read only when it is a
# regular file (`[ -f ]`: a FIFO in a copy of a board's files would block
# the read until the timeout) and only to its bound; dpkg-query, which reads
# the database's files itself, runs under timeout(1) where there is one.
_SCRIPT = r"""
R="$1"; S="$2"; C="$3"; L="$4"
T=; if command -v timeout >/dev/null 2>&1; then T="timeout 20"; fi
r() { [ -f "$1" ] && [ -r "$1" ]; }
f() { if r "$R$1"; then printf '\n@@f %s\n' "$1"; head -c "$S" "$R$1"; fi; }
c() { n="$1"; shift; printf '\n@@c %s\n' "$n"; "$@" 2>/dev/null; }
f /proc/sys/kernel/osrelease
f /proc/sys/kernel/version
f /proc/sys/kernel/arch
f /proc/device-tree/model
f /etc/os-release
if [ -z "$R" ]; then c uname-m uname -m; fi
rel=; if r "$R/proc/sys/kernel/osrelease"; then rel=$(head -c 200 "$R/proc/sys/kernel/osrelease" | tr -d '\n'); fi
# a release is a plain name: anything else is not put into a path here
case "$rel" in ''|*[!A-Za-z0-9._+~-]*|.*) rel= ;; esac
if r "$R/proc/config.gz"; then c config.gz sh -c 'gzip -dc "$1" | head -c "$2"' sh "$R/proc/config.gz" "$C"; fi
if [ -n "$rel" ] && r "$R/boot/config-$rel"; then c boot-config head -c "$C" "$R/boot/config-$rel"; fi
D="$R/var/lib/dpkg"
if [ -n "$rel" ] && r "$D/status" && command -v dpkg-query >/dev/null 2>&1; then
  pkg=
  for p in "/boot/vmlinuz-$rel" "/lib/modules/$rel/modules.builtin" "/lib/modules/$rel/modules.order"; do
    pkg=$($T dpkg-query --admindir="$D" -S "$p" 2>/dev/null | head -n 1 | sed 's/: .*//')
    [ -n "$pkg" ] && break
  done
  if [ -n "$pkg" ]; then
    printf '\n@@c dpkg-path\n%s\n' "$p"
    pkg=${pkg%%,*}; pkg=${pkg%%:*}
    case "$pkg" in ''|*[!a-z0-9.+-]*) pkg= ;; esac
  fi
  if [ -n "$pkg" ]; then
    c dpkg $T dpkg-query --admindir="$D" -W -f '${Package}\t${Version}\t${source:Package}\t${source:Version}\n' "$pkg"
    z="$R/usr/share/doc/$pkg/changelog.Debian.gz"
    if r "$z"; then c changelog sh -c 'gzip -dc "$1" | head -c "$2"' sh "$z" "$L"; fi
  fi
fi
exit 0
"""
READ_TIMEOUT_S = 90     # the script reads a few files and asks dpkg-query twice: seconds on a Pi Zero


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


def _blocks(out: str) -> tuple[dict[str, str], dict[str, str]]:
    files: dict[str, str] = {}
    commands: dict[str, str] = {}
    name: str | None = None
    kind: str | None = None
    body: list[str] = []
    for line in out.split("\n") + ["@@end"]:
        if m := re.match(r"^@@(f|c|end) ?(.*)$", line):
            if name is not None:
                (files if kind == "f" else commands)[name] = "\n".join(body).strip("\n")
            kind, name, body = m[1], m[2], []
        elif name is not None:
            body.append(line)
    return files, commands


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
        proc = transport.run(["sh", "-c", _SCRIPT, "sh", root, str(SMALL_MAX), str(CONFIG_MAX), str(CHANGELOG_MAX)],
                             timeout=READ_TIMEOUT_S, step="reading the running kernel")
    except subprocess.TimeoutExpired:
        raise UserError(f"reading the running kernel of {where} took more than {READ_TIMEOUT_S} s: check that "
                        "its files (or the --sysroot copy) are regular files and that dpkg-query answers") from None
    if proc.returncode:
        raise UserError(f"could not read the running kernel of {where}: "
                        f"{(proc.stderr.strip().splitlines() or [f'exit status {proc.returncode}'])[-1]}")
    files, commands = _blocks(proc.stdout)
    release = files.get("/proc/sys/kernel/osrelease", "").strip()
    if not release:
        below = f" below {root}" if root else ""
        raise UserError(f"{where} has no /proc/sys/kernel/osrelease{below}: not a running Linux (or not its /proc)")
    if not re.fullmatch(r"[A-Za-z0-9._+~-]{1,128}", release) or release.startswith("."):
        raise UserError(f"{where} reports a kernel release rtforge cannot use as a name: {release[:80]!r}")
    config_text, config_from = None, None
    if commands.get("config.gz"):
        config_text, config_from = commands["config.gz"], "/proc/config.gz"
    elif commands.get("boot-config"):
        config_text, config_from = commands["boot-config"], f"/boot/config-{release}"
    config = parse_config(config_text) if config_text else None
    if config is not None and not config:
        config, config_text, config_from = None, None, None      # not a kernel configuration at all
    os_name = next((m[1] for m in re.finditer(r'^PRETTY_NAME="?([^"\n]*)"?$', files.get("/etc/os-release", ""),
                                               re.M)), "")
    machine = (commands.get("uname-m") or files.get("/proc/sys/kernel/arch") or "").strip() \
        or _machine_from_config(config)
    k = RunningKernel(host=where + (f" (below {root})" if root else ""), release=release,
                      uname_v=files.get("/proc/sys/kernel/version", "").strip(), machine=machine,
                      model=files.get("/proc/device-tree/model", "").replace("\0", "").strip(), os_name=os_name,
                      config=config, config_text=config_text, config_from=config_from)
    row = commands.get("dpkg", "").splitlines()
    if row and len(cols := row[0].split("\t")) >= 4:
        k.package, k.package_version = cols[0], cols[1]
        k.source_package = cols[2] or cols[0]
        k.changelog_head = newest_entry(commands.get("changelog", ""))
        k.refs = changelog_refs(k.changelog_head)
    return k
