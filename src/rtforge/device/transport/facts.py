"""What a device is, learned in one round trip: the one facts script, and
the one rule for whether rtforge is root there.

Everything that must know a board (or this machine) before it acts reads it
here: deploy, tune and `rtforge target info` (Device.facts), the first
contact of a latency run or a benchmark (measure/target.py), and doctor's
and tune's snapshot, which calls the same shell function inside its own
round trip (state/snapshot.py).  A transport asks `id -u` for sudo's sake
and judges the answer with `uid_is_root` too.

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

    def run(self, argv: list[str], *, timeout: float | None = None, check: bool = False,
            step: str | None = None) -> subprocess.CompletedProcess: ...

# A shell function, so that a larger script (the snapshot) can call it in its
# own round trip: rtforge_facts ROOT [TOOL...].  Each fact follows a line
# "@@name"; the tryboot flag is a big-endian u32 property, printed as bytes by
# od; "tools" lists the TOOLs found on PATH; "ssh" is SSH_CONNECTION, whose
# third word is the device's own address of this connection (the address this
# host reaches it at, also through an ssh config alias).  config.txt lives in
# /boot/firmware on Raspberry Pi OS bookworm and later, in /boot before.
_FUNCTION = r"""
rtforge_facts() {
  _R="$1"; shift
  RTFORGE_ROOT="$_R"   # rtforge_cat: under a tree, only files whose real path stays in it
  _s() { printf '\n@@%s\n' "$1"; }
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
FUNCTION = safesh.functions() + _FUNCTION
SCRIPT = FUNCTION + 'rtforge_facts "$@"\nexit 0\n'
NAMES = ("machine", "release", "version", "hostname", "model", "realtime", "os", "bootdir", "tryboot", "bootid",
         "df_boot", "df_root", "grub", "uid", "user", "panic", "cmdline", "config", "online", "allowed", "ncpus", "ssh",
         "tools", "paths", "systemd")


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
    """{name: value} of the "@@name" blocks in the script's output."""
    v: dict[str, str] = {}
    for block in out.split("\n@@")[1:]:
        key, _, value = block.partition("\n")
        v[key] = value.strip("\n\0 ")
    return v


def _df_free(text: str) -> int | None:
    lines = text.strip().splitlines()
    return int(lines[-1].split()[3]) if len(lines) >= 2 else None


def from_blocks(v: dict[str, str]) -> DeviceFacts:
    """The facts from the blocks of the facts function's output."""
    pretty = next((line.split("=", 1)[1].strip('"') for line in v.get("os", "").splitlines()
                   if line.startswith("PRETTY_NAME=")), None)
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


# The facts, then a caller's command (shell-quoted, in $1), whose output is
# the block "then" and its exit status the block "then_status".
SCRIPT_THEN = FUNCTION + ('_then=$1; shift\nrtforge_facts "$@"\nprintf \'\\n@@then\\n\'\neval "$_then"\n'
                          'printf \'\\n@@then_status\\n%s\\n\' "$?"\nexit 0\n')


def read_facts(t: Runs, root: str = "", tools: tuple[str, ...] | list[str] = (), *,
               timeout: float | None = None) -> DeviceFacts:
    """Everything in one round trip (a board on Wi-Fi pays for each)."""
    return read_facts_then(t, root, tools, timeout=timeout)[0]


def read_facts_then(t: Runs, root: str = "", tools: tuple[str, ...] | list[str] = (), then: list[str] | None = None,
                    *, timeout: float | None = None) -> tuple[DeviceFacts, str, int]:
    """read_facts, and the output and exit status of the command `then` run
    after them in the same round trip."""
    if then is None:
        argv = ["/bin/sh", "-c", SCRIPT, "sh", root.rstrip("/"), *tools]
    else:
        argv = ["/bin/sh", "-c", SCRIPT_THEN, "sh", shlex.join(then), root.rstrip("/"), *tools]
    out = t.run(argv, check=True, timeout=timeout, step="reading the board's facts").stdout
    found = blocks(out)
    status = found.get("then_status", "0")
    return from_blocks(found), found.get("then", ""), int(status) if status.isdigit() else 1
