"""What a device is, learned in one round trip: the one facts script, and
the one rule for whether rtforge is root there.

Everything that must know a board (or this machine) before it acts reads it
here: deploy, tune and `rtforge target info` (Device.facts), the first
contact of a latency run or a benchmark (measure/target.py), and doctor's
and tune's snapshot, which calls the same shell function inside its own
round trip (state/snapshot.py).  A transport asks `id -u` for sudo's sake
and judges the answer with `uid_is_root` too.

The script is in named sections, each a shell function printing blocks,
each after a line "\0@@name" (one wire format, MARK); a caller names the
sections it needs and gets them in one round trip:

    device  what deploy, tune, a run's first contact and the monitor need
            (rtforge_facts: uname, the boot folder, df, who rtforge is there,
            CPUs, tools, systemd, ...)                         -> DeviceFacts
    kernel  the running kernel as the files below the root say -- its
            release, configuration, the dpkg package that installed it and
            that package's newest changelog entry (`kernel build --match`,
            kernel/running.py)                                 -> KernelFacts
    trace   whether the machine can trace: tracefs (mounted where it can
            be), the kernel's tracers, rtla and its auto-analysis
            (`latency --trace`, the monitor's alerts, measure/trace.py) -> TraceFacts

A block's name means one thing whichever section prints it ("release" is
`uname -r` in device and trace alike).

Files are read below the device's root ("" on a real board; a test tree or
--sysroot otherwise); commands (uname, id, getconf) and the shell's own
/proc/$$/status always answer for the machine the script runs on.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ...preempt import preempt_model
from . import safesh


class Runs(Protocol):
    """What reading the facts needs of a transport: running argv there.  (A
    Transport is one; this module sits below transport.py, which judges its
    own `id -u` by uid_is_root.)"""

    def run(self, argv: list[str], *, timeout: float | None = None, sudo: bool = False, check: bool = False,
            step: str | None = None) -> subprocess.CompletedProcess: ...

# Where a block starts: a line "\0@@name".  The NUL is what no thread name
# (/proc/PID/stat), file name or command line can hold, so nothing a local
# user on the board controls can start a block of its own ("x\n@@c fds" is a
# valid thread name).  A --sysroot tree's files can hold one: what they forge
# is only what the tree says of itself.
MARK = "\n\0@@"

# A shell function, so that a larger script (the snapshot) can call it in its
# own round trip: rtforge_facts ROOT [TOOL...].  Each fact follows a line
# "\0@@name" (MARK); the tryboot flag is a big-endian u32 property, printed as bytes by
# od; "tools" lists the TOOLs found on PATH; "ssh" is SSH_CONNECTION, whose
# third word is the device's own address of this connection (the address this
# host reaches it at, also through an ssh config alias).  config.txt lives in
# /boot/firmware on Raspberry Pi OS bookworm and later, in /boot before.
_FUNCTION = r"""
rtforge_facts() {
  _R="$1"; shift
  RTFORGE_ROOT="$_R"   # rtforge_cat: under a tree, only files whose real path stays in it
  _s() { printf '\n\000@@%s\n' "$1"; }
  _c() { rtforge_cat "$_R$1" "${2:-65536}" 2>/dev/null; }
  _s machine; uname -m
  _s release; uname -r
  _s version; uname -v
  _s hostname; uname -n
  _s model; _c /proc/device-tree/model | tr -d '\000'
  _s realtime; _c /sys/kernel/realtime
  _s os; _c /etc/os-release
  _B=""; for _d in /boot/firmware /boot; do if [ -e "$_R$_d/config.txt" ]; then _B="$_d"; break; fi; done
  _s bootdir; echo "$_B"
  _s tryboot; _c /proc/device-tree/chosen/bootloader/tryboot | od -An -tu1
  _s bootid; _c /proc/sys/kernel/random/boot_id
  _s df_boot; [ -n "$_B" ] && df -P -k "$_R$_B" 2>/dev/null
  _s df_root; df -P -k "$_R/" 2>/dev/null
  _s grub; command -v grub-reboot
  _s uid; id -u
  _s user; id -un
  _s panic; _c /proc/sys/kernel/panic
  _s cmdline; _c /proc/cmdline
  _P='^(CONFIG_PREEMPT_RT(_FULL)?=|# CONFIG_PREEMPT_RT(_FULL)? is not set)'
  if [ -f "$_R/proc/config.gz" ] && [ -r "$_R/proc/config.gz" ] && rtforge_inside "$_R/proc/config.gz"; then
    _s config; echo /proc/config.gz; gzip -dc "$_R/proc/config.gz" 2>/dev/null | head -c 16777216 | grep -E "$_P"
  elif [ -f "$_R/boot/config-$(uname -r)" ] && [ -r "$_R/boot/config-$(uname -r)" ]; then
    _s config; echo "/boot/config-$(uname -r)"; _c "/boot/config-$(uname -r)" 16777216 | grep -E "$_P"
  fi
  _s online; _c /sys/devices/system/cpu/online
  _s allowed; sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$$/status 2>/dev/null
  _s ncpus; getconf _NPROCESSORS_ONLN 2>/dev/null || nproc --all 2>/dev/null
  _s ssh; printf '%s\n' "${SSH_CONNECTION:-}"
  _s tools; for _t in "$@"; do command -v "$_t" >/dev/null 2>&1 && printf '%s\n' "$_t"; done
  _s paths; for _t in "$@"; do command -v "$_t" 2>/dev/null; done
  _s systemd; [ -d "$_R/run/systemd/system" ] && echo 1
  return 0
}
"""
# Files are read bounded and regular-only (data/safe.sh's rtforge_cat): a
# FIFO or a link to /dev/zero in a --sysroot tree is skipped, not waited on.
# FUNCTION is the device section alone, for a larger script that calls it in
# its own round trip (state/snapshot.py).
FUNCTION = safesh.functions() + _FUNCTION
NAMES = ("machine", "release", "version", "hostname", "model", "realtime", "os", "bootdir", "tryboot", "bootid",
         "df_boot", "df_root", "grub", "uid", "user", "panic", "cmdline", "config", "online", "allowed", "ncpus", "ssh",
         "tools", "paths", "systemd")

# The kernel section: rtforge_facts_kernel ROOT.  What a board answers is
# data, never code (architecture rule 12): every file is read bounded, the
# release must be a plain name before it is put into a path, and dpkg-query
# (which reads the database's files itself, so only after its status file
# was found regular) runs under timeout(1) where there is one.  uname -m
# only answers for a real board's root: a tree's machine is in its files.
KERNEL_SMALL_MAX = 4 << 10
KERNEL_CONFIG_MAX = 4 << 20       # a distribution's .config is ~0.3 MB
KERNEL_CHANGELOG_MAX = 64 << 10   # the newest entries are at the top
_KERNEL = r"""
rtforge_facts_kernel() {
  _kR="$1"
  RTFORGE_ROOT="$_kR"
  _ks() { printf '\n\000@@%s\n' "$1"; }
  _kc() { rtforge_cat "$_kR$1" "${2:-@SMALL@}" 2>/dev/null; }
  _kok() { [ -f "$_kR$1" ] && [ -r "$_kR$1" ] && rtforge_inside "$_kR$1"; }
  _kz() { _kok "$1" && gzip -dc "$_kR$1" 2>/dev/null | head -c "$2"; }
  _ks k_release; _kc /proc/sys/kernel/osrelease
  _ks k_version; _kc /proc/sys/kernel/version
  _ks k_arch; _kc /proc/sys/kernel/arch
  _ks k_model; _kc /proc/device-tree/model | tr -d '\000'
  _ks k_os; _kc /etc/os-release
  _ks k_machine; [ -z "$_kR" ] && uname -m
  _kr=$(_kc /proc/sys/kernel/osrelease 200 | tr -d '\n')
  case "$_kr" in ''|*[!A-Za-z0-9._+~-]*|.*) _kr= ;; esac
  _ks k_config_gz; _kz /proc/config.gz @CONFIG@
  _ks k_boot_config; [ -n "$_kr" ] && _kc "/boot/config-$_kr" @CONFIG@
  _kT=; command -v timeout >/dev/null 2>&1 && _kT="timeout 20"
  _kD="$_kR/var/lib/dpkg"
  if [ -n "$_kr" ] && _kok /var/lib/dpkg/status && command -v dpkg-query >/dev/null 2>&1; then
    _kp=
    for _kf in "/boot/vmlinuz-$_kr" "/lib/modules/$_kr/modules.builtin" "/lib/modules/$_kr/modules.order"; do
      # shellcheck disable=SC2086  # _kT is "timeout 20" or nothing
      _kp=$($_kT dpkg-query --admindir="$_kD" -S "$_kf" 2>/dev/null | head -n 1 | sed 's/: .*//')
      [ -n "$_kp" ] && break
    done
    if [ -n "$_kp" ]; then
      _ks k_dpkg_path; printf '%s\n' "$_kf"
      _kp=${_kp%%,*}; _kp=${_kp%%:*}
      case "$_kp" in ''|*[!a-z0-9.+-]*) _kp= ;; esac
    fi
    if [ -n "$_kp" ]; then
      _ks k_dpkg
      # shellcheck disable=SC2016,SC2086  # dpkg-query's own ${...}; _kT as above
      $_kT dpkg-query --admindir="$_kD" -W \
        -f '${Package}\t${Version}\t${source:Package}\t${source:Version}\n' "$_kp" 2>/dev/null
      _ks k_changelog; _kz "/usr/share/doc/$_kp/changelog.Debian.gz" @CHANGELOG@
    fi
  fi
  return 0
}
""".replace("@SMALL@", str(KERNEL_SMALL_MAX)).replace("@CONFIG@", str(KERNEL_CONFIG_MAX)) \
    .replace("@CHANGELOG@", str(KERNEL_CHANGELOG_MAX))
KERNEL_NAMES = ("k_release", "k_version", "k_arch", "k_model", "k_os", "k_machine", "k_config_gz", "k_boot_config",
                "k_dpkg_path", "k_dpkg", "k_changelog")

# The trace section: rtforge_facts_trace.  tracefs is mounted where it is not
# yet and can be (rtla would mount it itself; without it the kernel's tracers
# cannot be listed); its files are root's, so this section is read as root.
# rtforge asks rtla for --aa-only (timerlat_aa.c came after Debian 12's rtla
# 6.1, which has only the stop), so the check is for that option in its help.
_TRACE = r"""
rtforge_facts_trace() {
  RTFORGE_ROOT=   # the machine's own tracing, whatever root another section read below
  _tT=
  for _td in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    [ -r "$_td/available_tracers" ] && { _tT=$_td; break; }
  done
  if grep -qw tracefs /proc/filesystems 2>/dev/null; then
    printf '\n\000@@tracefs_known\n1\n'
    if [ -z "$_tT" ] && [ "$(id -u)" = 0 ] && [ -d /sys/kernel/tracing ]; then
      mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null && [ -r /sys/kernel/tracing/available_tracers ] \
        && _tT=/sys/kernel/tracing
    fi
  fi
  printf '\n\000@@tracefs\n%s\n' "$_tT"
  printf '\n\000@@tracers\n'; [ -n "$_tT" ] && rtforge_cat "$_tT/available_tracers" 2>/dev/null
  if command -v rtla >/dev/null 2>&1; then
    printf '\n\000@@rtla\n1\n'
    rtla timerlat top --help 2>&1 | grep -q -- '--aa-only' && printf '\n\000@@rtla_aa\n1\n'
  fi
  printf '\n\000@@release\n'; uname -r
  return 0
}
"""
TRACE_NAMES = ("tracefs_known", "tracefs", "tracers", "rtla", "rtla_aa", "release")

SECTIONS = {"device": NAMES, "kernel": KERNEL_NAMES, "trace": TRACE_NAMES}

# The one script: sh -c SCRIPT sh THEN ROOT SECTIONS [TOOL...].  SECTIONS
# names the sections, in order, separated by spaces; THEN, when not empty, is
# a caller's command (shell-quoted) run after them, whose output is the block
# "then" and its exit status the block "then_status".
SCRIPT = FUNCTION + _KERNEL + _TRACE + r"""
_then=$1 _root=$2 _sections=$3; shift 3
for _section in $_sections; do
  case "$_section" in
    device) rtforge_facts "$_root" "$@" ;;
    kernel) rtforge_facts_kernel "$_root" ;;
    trace) rtforge_facts_trace ;;
  esac
done
if [ -n "$_then" ]; then
  printf '\n\000@@then\n'; eval "$_then"; printf '\n\000@@then_status\n%s\n' "$?"
fi
exit 0
"""


def uid_is_root(uid: str | int) -> bool:
    """rtforge is root there (uid 0): no sudo, and RLIMIT_RTPRIO/MEMLOCK do not bind."""
    return str(uid).strip() == "0"


@dataclass
class DeviceFacts:
    model: str | None           # /proc/device-tree/model, e.g. "Raspberry Pi 4 Model B Rev 1.4"
    machine: str                # uname -m
    release: str                # uname -r
    version: str                # uname -v
    realtime: int | None        # /sys/kernel/realtime (RT-patched kernels only)
    os: str | None              # PRETTY_NAME of /etc/os-release
    boot_dir: str | None        # where config.txt is (None: not a Raspberry Pi firmware layout)
    boot_free_kb: int | None
    root_free_kb: int | None
    tryboot_supported: bool     # the firmware exposes the tryboot flag
    tryboot_now: bool | None    # this boot was a try (tryboot.txt)
    boot_id: str                # changes on every boot
    grub: bool                  # a GRUB system (x86 and others): grub-reboot is there
    is_root: bool
    panic_s: int | None = None  # /proc/sys/kernel/panic: seconds until a panicked kernel resets (0: never)
    cmdline: str = ""           # /proc/cmdline: what this boot's kernel was given
    config_from: str | None = None   # the running configuration read: /proc/config.gz or /boot/config-<release>
    config_rt: list[str] = field(default_factory=list)  # its PREEMPT_RT lines (=y, or "is not set")
    # what a run's first contact needs besides (not part of `target info --json`)
    hostname: str = ""          # uname -n
    user: str = ""              # id -un
    online: str = ""            # /sys/devices/system/cpu/online, as the kernel writes the list
    allowed: str = ""           # Cpus_allowed_list of the script's shell
    ncpus: int | None = None    # online CPUs
    ssh_address: str | None = None   # the device's address of this SSH connection (None: not over SSH)
    tools: set[str] = field(default_factory=set)  # of the tools asked for, those on PATH
    paths: dict[str, str] = field(default_factory=dict)  # and where each is
    systemd: bool = False       # systemd is PID 1 there (/run/systemd/system exists)

    @property
    def preempt_model(self) -> str:
        return preempt_model(self.version, None, self.realtime)

    def to_dict(self) -> dict[str, Any]:
        shown = {k: v for k, v in asdict(self).items() if k not in _CONTACT_ONLY}
        return {**shown, "preempt_model": self.preempt_model}

    def panic_warning(self, where: str) -> str | None:
        """A kernel that panics only falls back if it resets: say how, when it would not."""
        if self.panic_s != 0:
            return None
        return ("a kernel that panics will hang here instead of resetting, so falling back needs a power cycle: "
                f"add panic=10 to the kernel command line ({where}) or enable a hardware watchdog")


_CONTACT_ONLY = ("hostname", "user", "online", "allowed", "ncpus", "ssh_address", "tools", "paths", "systemd")


def blocks(out: str) -> dict[str, str]:
    """{name: value} of the "\\0@@name" blocks in the script's output."""
    v: dict[str, str] = {}
    for block in out.split(MARK)[1:]:
        key, _, value = block.partition("\n")
        v[key] = value.strip("\n\0 ")
    return v


def _df_free(text: str) -> int | None:
    lines = text.strip().splitlines()
    return int(lines[-1].split()[3]) if len(lines) >= 2 else None


def pretty_name(os_release: str) -> str | None:
    """PRETTY_NAME of an /etc/os-release text."""
    return next((line.split("=", 1)[1].strip().strip('"') for line in os_release.splitlines()
                 if line.startswith("PRETTY_NAME=")), None)


def from_blocks(v: dict[str, str]) -> DeviceFacts:
    """The facts from the blocks of the facts function's output."""
    pretty = pretty_name(v.get("os", ""))
    flag = [int(b) for b in v.get("tryboot", "").split()]
    ssh = v.get("ssh", "").split()
    return DeviceFacts(
        model=v.get("model") or None,
        machine=v.get("machine", ""),
        release=v.get("release", ""),
        version=v.get("version", ""),
        realtime=int(v["realtime"]) if v.get("realtime", "").isdigit() else None,
        os=pretty,
        boot_dir=v.get("bootdir") or None,
        boot_free_kb=_df_free(v.get("df_boot", "")),
        root_free_kb=_df_free(v.get("df_root", "")),
        tryboot_supported=len(flag) >= 4,
        tryboot_now=bool(int.from_bytes(bytes(flag[:4]), "big")) if len(flag) >= 4 else None,
        boot_id=v.get("bootid", ""),
        grub=bool(v.get("grub")),
        is_root=uid_is_root(v.get("uid", "")),
        panic_s=int(v["panic"]) if v.get("panic", "").lstrip("-").isdigit() else None,
        cmdline=v.get("cmdline", ""),
        config_from=next(iter(v["config"].splitlines()), None) if "config" in v else None,
        config_rt=v["config"].splitlines()[1:] if "config" in v else [],
        hostname=v.get("hostname", ""),
        user=v.get("user", ""),
        online=v.get("online", ""),
        allowed=v.get("allowed", ""),
        ncpus=int(v["ncpus"]) if v.get("ncpus", "").isdigit() else None,
        ssh_address=ssh[2] if len(ssh) >= 3 else None,
        tools=set(v.get("tools", "").split()),
        paths={p.rsplit("/", 1)[-1]: p for p in v.get("paths", "").splitlines() if p.startswith("/")},
        systemd=v.get("systemd") == "1",
    )


@dataclass
class KernelFacts:
    """The kernel section: the running kernel as the files below the root say
    (a copy of a board's files says what that board runs, not this machine)."""
    release: str                # /proc/sys/kernel/osrelease, as written there (checked by the caller)
    version: str                # /proc/sys/kernel/version: uname -v
    arch: str                   # /proc/sys/kernel/arch
    machine: str                # uname -m: only when the root is the machine's own ("")
    model: str                  # /proc/device-tree/model ("" off a Pi)
    os: str | None              # PRETTY_NAME of /etc/os-release
    config_gz: str              # /proc/config.gz's text (bounded), "" without one
    boot_config: str            # /boot/config-<release>'s text (bounded), "" without one
    dpkg_path: str | None       # the file dpkg's database names the kernel's package by
    dpkg: list[str] | None      # that package's Package, Version, source:Package, source:Version
    changelog: str              # the start of its changelog.Debian.gz


def kernel_from_blocks(v: dict[str, str]) -> KernelFacts:
    row = v.get("k_dpkg", "").splitlines()
    cols = row[0].split("\t") if row else []
    return KernelFacts(
        release=v.get("k_release", "").strip(), version=v.get("k_version", "").strip(),
        arch=v.get("k_arch", "").strip(), machine=v.get("k_machine", "").strip(),
        model=v.get("k_model", "").replace("\0", "").strip(), os=pretty_name(v.get("k_os", "")),
        config_gz=v.get("k_config_gz", ""), boot_config=v.get("k_boot_config", ""),
        dpkg_path=v.get("k_dpkg_path") or None, dpkg=cols if len(cols) >= 4 else None,
        changelog=v.get("k_changelog", ""))


@dataclass
class TraceFacts:
    """The trace section: what the machine offers for rtla's timerlat analysis."""
    tracefs: str | None        # where tracefs is mounted (None: not mounted, not mountable)
    tracefs_known: bool        # the kernel has tracefs at all
    tracers: list[str]
    rtla: bool
    rtla_aa: bool              # rtla has auto-analysis without statistics (--aa-only)
    kernel: str = ""           # uname -r


def trace_from_blocks(v: dict[str, str]) -> TraceFacts:
    return TraceFacts(tracefs=v.get("tracefs") or None, tracefs_known=v.get("tracefs_known") == "1",
                      tracers=v.get("tracers", "").split(), rtla=v.get("rtla") == "1",
                      rtla_aa=v.get("rtla_aa") == "1", kernel=v.get("release", ""))


def run_sections(t: Runs, sections: tuple[str, ...] | list[str], root: str = "",
                 tools: tuple[str, ...] | list[str] = (), then: list[str] | None = None, *, sudo: bool = False,
                 timeout: float | None = None, check: bool = True,
                 step: str = "reading the board's facts") -> subprocess.CompletedProcess:
    """The facts script with the named sections (and `then` after them), in
    one round trip; its output holds the sections' blocks (see blocks())."""
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise ValueError(f"no facts section {unknown[0]!r}: the sections are {', '.join(SECTIONS)}")
    argv = ["/bin/sh", "-c", SCRIPT, "sh", shlex.join(then) if then else "", root.rstrip("/"), " ".join(sections),
            *tools]
    return t.run(argv, sudo=sudo, check=check, timeout=timeout, step=step)


def read_facts(t: Runs, root: str = "", tools: tuple[str, ...] | list[str] = (), *,
               timeout: float | None = None) -> DeviceFacts:
    """Everything in one round trip (a board on Wi-Fi pays for each)."""
    return read_facts_then(t, root, tools, timeout=timeout)[0]


def read_facts_then(t: Runs, root: str = "", tools: tuple[str, ...] | list[str] = (), then: list[str] | None = None,
                    *, timeout: float | None = None) -> tuple[DeviceFacts, str, int]:
    """read_facts, and the output and exit status of the command `then` run
    after them in the same round trip."""
    found = blocks(run_sections(t, ("device",), root, tools, then, timeout=timeout).stdout)
    status = found.get("then_status", "0")
    return from_blocks(found), found.get("then", ""), int(status) if status.isdigit() else 1


def read_trace(t: Runs, *, sudo: bool = False) -> TraceFacts:
    """The trace section alone (as root with sudo=True: tracefs is root's).
    A script that fails says nothing of tracing: every part reads as missing."""
    return trace_from_blocks(blocks(run_sections(t, ("trace",), sudo=sudo, check=False,
                                                 step="checking the kernel's tracers").stdout))
