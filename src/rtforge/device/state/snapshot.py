"""What doctor and tune read from a target, in one round trip.

A board on Wi-Fi pays for every round trip, so one small POSIX-sh script
reads every file of interest (each after a "\\0@@f PATH" line), the device's
facts (transport/facts.py's function: who rtforge runs as there, uname,
...), runs the few commands whose answer is not in a file (iw, vcgencmd,
getconf), and -- when asked -- samples the threads' CPU time and the
interrupt counts twice, a window apart, on the target's own clock.  Paths
are read below a root: "" on a real target, a fixture tree for tests
(--sysroot), so the same code reads a Pi's /proc and /sys on a test
machine.  Commands always run on the target itself.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from ..transport import facts
from ..transport.facts import DeviceFacts
from ..transport.transport import Transport
from .procparse import ThreadStat, stat_records

# Files doctor and tune read, as shell globs below the root.  A pattern that
# matches nothing is skipped.
FILES = [
    "/proc/cmdline", "/proc/sys/kernel/osrelease", "/proc/sys/kernel/version", "/sys/kernel/realtime",
    "/proc/device-tree/model", "/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/arch", "/proc/sys/kernel/printk",
    "/proc/sys/kernel/sched_rt_runtime_us", "/proc/sys/kernel/sched_rt_period_us",
    "/proc/self/limits", "/etc/security/limits.conf", "/etc/security/limits.d/*.conf",
    "/proc/swaps", "/proc/sys/vm/swappiness", "/proc/consoles", "/proc/interrupts",
    "/sys/devices/system/cpu/online", "/sys/devices/system/cpu/isolated", "/sys/devices/system/cpu/nohz_full",
    "/sys/devices/system/cpu/cpufreq/policy*/scaling_governor",
    "/sys/devices/system/cpu/cpufreq/policy*/scaling_available_governors",
    "/sys/devices/system/cpu/cpufreq/policy*/scaling_min_freq",
    "/sys/devices/system/cpu/cpufreq/policy*/scaling_max_freq",
    "/sys/devices/system/cpu/cpufreq/policy*/cpuinfo_min_freq",
    "/sys/devices/system/cpu/cpufreq/policy*/cpuinfo_max_freq",
    "/sys/devices/system/cpu/cpufreq/policy*/affected_cpus",
    "/sys/devices/system/cpu/cpuidle/current_driver",
    "/sys/devices/system/cpu/cpu*/cpuidle/state*/name", "/sys/devices/system/cpu/cpu*/cpuidle/state*/latency",
    "/sys/devices/system/cpu/cpu*/cpuidle/state*/disable",
    "/proc/irq/*/smp_affinity_list", "/proc/irq/default_smp_affinity",
    "/sys/class/thermal/thermal_zone*/type", "/sys/class/thermal/thermal_zone*/temp",
    "/sys/class/thermal/thermal_zone*/trip_point_*_type", "/sys/class/thermal/thermal_zone*/trip_point_*_temp",
    "/sys/module/dwc_otg/parameters/fiq_enable", "/sys/module/dwc_otg/parameters/fiq_fsm_enable",
    "/boot/firmware/cmdline.txt", "/boot/cmdline.txt",
    "/var/lib/rtforge/tune-state.json",
]

# $1 root, $2 window in seconds (0: no sampling).  Each block starts on a
# line of its own, NUL first (facts.MARK: nothing a user names can forge
# one): "\0@@f PATH", "@@c NAME" (command output), "@@rc NAME N", "@@w IFACE"
# (a wireless interface), "@@s N WHAT" (sample N).
# Files: bounded, regular only, and under a tree (--sysroot) only those whose
# real path stays inside it (data/safe.sh's rtforge_cat, in facts.FUNCTION).
_PRELUDE = r"""
R="$1"; W="$2"; RTFORGE_ROOT="$R"
f() {
  for p in "$@"; do
    [ -f "$p" ] && [ -r "$p" ] && rtforge_inside "$p" || continue
    printf '\n\000@@f %s\n' "${p#"$R"}"; rtforge_cat "$p" 2>/dev/null
  done
}
c() { n="$1"; shift; printf '\n\000@@c %s\n' "$n"; "$@" 2>&1; r=$?; printf '\n\000@@rc %s %s\n' "$n" "$r"; }
have() { command -v "$1" >/dev/null 2>&1; }
"""

_TAIL = r"""
rel=$(rtforge_cat "$R/proc/sys/kernel/osrelease" 256 2>/dev/null)
f "$R/boot/config-$rel"
if [ -f "$R/proc/config.gz" ] && [ -r "$R/proc/config.gz" ] && rtforge_inside "$R/proc/config.gz"; then
  c config.gz sh -c 'gzip -dc "$1" | head -c 16777216' sh "$R/proc/config.gz"
fi
for i in "$R"/sys/class/net/*; do
  if [ -e "$i/phy80211" ] || [ -e "$i/wireless" ]; then
    n=${i##*/}; printf '\n\000@@w %s\n' "$n"
    if have iw; then c "iw:$n" iw dev "$n" get power_save; elif have iwconfig; then c "iwconfig:$n" iwconfig "$n"; fi
  fi
done
# the sysfs file WARNs once per boot on newer kernels: ask vcgencmd when it is there
if [ -z "$R" ] && have vcgencmd; then c vcgencmd vcgencmd get_throttled
else f "$R/sys/devices/platform/soc/soc:firmware/get_throttled"; fi
c clk_tck getconf CLK_TCK
rtforge_facts "$R"
P=root
if [ "$(id -u)" != 0 ]; then if sudo -n true 2>/dev/null; then P=sudo; else P=no; fi; fi
# shellcheck disable=SC2317  # called through c()
priv() { if [ "$P" = sudo ]; then sudo -n -- "$@"; else "$@"; fi; }
if [ "$P" != no ]; then
  if [ -e "$R/dev/cpu_dma_latency" ]; then c dma_latency priv od -An -td4 "$R/dev/cpu_dma_latency"; fi
  # the fds open on /dev/cpu_dma_latency, by their /proc paths (the kernel's
  # names, not the names of files a user opened: `ls -l` printed those, and a
  # file named "x\n/proc/1/fd:" forged a holder); a tree's links by their text
  # shellcheck disable=SC2016
  c fds priv sh -c 'for l in "$1"/proc/[0-9]*/fd/*; do
    if [ -z "$1" ]; then [ "$l" -ef /dev/cpu_dma_latency ]; else [ "$(readlink "$l")" = /dev/cpu_dma_latency ]; fi \
      && printf "%s\n" "${l#"$1"}"; done; true' sh "$R"
fi
sample() {
  printf '\n\000@@s %s uptime\n' "$1"; rtforge_cat "$R/proc/uptime"
  printf '\n\000@@s %s interrupts\n' "$1"; rtforge_cat "$R/proc/interrupts" 2>/dev/null
  printf '\n\000@@s %s stat\n' "$1"
  # the kernel's own /proc at once; a tree's files one by one, checked
  if [ -z "$R" ]; then cat /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null
  else for t in "$R"/proc/[0-9]*/task/[0-9]*/stat; do rtforge_cat "$t" 4096 2>/dev/null; done; fi
}
if [ "$W" != 0 ]; then sample 1; sleep "$W"; sample 2; fi
exit 0
"""


def _script() -> str:
    # Patterns are rtforge's own constants: "$R" is quoted, the glob is not.
    lines = [f'f "$R"{p}' for p in FILES]
    return _PRELUDE + facts.FUNCTION + "\n".join(lines) + _TAIL


@dataclass
class Sample:
    uptime_s: float
    interrupts: str
    threads: dict[tuple[int, int], ThreadStat]


@dataclass
class Snapshot:
    root: str
    files: dict[str, str] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    returncodes: dict[str, int] = field(default_factory=dict)
    wireless: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    facts: DeviceFacts | None = None    # None: read by a script without the facts function

    def text(self, path: str) -> str | None:
        return self.files.get(path)

    def value(self, path: str) -> str | None:
        """The file's content without surrounding whitespace (and the NUL of
        device-tree strings); None when the file is not there."""
        t = self.files.get(path)
        return None if t is None else t.strip().strip("\0").strip()

    def number(self, path: str) -> int | None:
        """The file's content as a whole number; None when it is not there or not one."""
        v = self.value(path)
        try:
            return int(v) if v is not None else None
        except ValueError:
            return None

    def glob(self, pattern: str) -> list[str]:
        return sorted(p for p in self.files if fnmatch.fnmatchcase(p, pattern))

    def command(self, name: str) -> str | None:
        """A command's output, None if it did not run or failed."""
        if name not in self.commands or self.returncodes.get(name, 1) != 0:
            return None
        return self.commands[name]

    @property
    def clk_tck(self) -> int:
        v = (self.command("clk_tck") or "").strip()
        return int(v) if v.isdigit() else 100

    @property
    def is_root(self) -> bool:
        return bool(self.facts and self.facts.is_root)

    @property
    def user(self) -> str:
        return (self.facts.user if self.facts else "") or "?"

    @property
    def machine(self) -> str | None:
        """uname -m of the machine the script ran on."""
        return self.facts.machine if self.facts else None


def parse_output(out: str, root: str) -> Snapshot:
    snap = Snapshot(root=root)
    raw_samples: dict[str, dict[str, str]] = {}
    raw_facts: dict[str, str] = {}
    for block in out.split(facts.MARK)[1:]:
        head, _, body = block.partition("\n")
        kind, _, name = head.partition(" ")
        if kind == "f":
            snap.files[name] = body
        elif kind == "c":
            snap.commands[name] = body
        elif kind == "rc":
            cmd, _, rc = name.rpartition(" ")
            snap.returncodes[cmd] = int(rc) if rc.lstrip("-").isdigit() else 1
        elif kind == "w":
            snap.wireless.append(name)
        elif kind == "s":
            n, _, what = name.partition(" ")
            raw_samples.setdefault(n, {})[what] = body
        elif head in facts.NAMES:
            raw_facts[head] = body.strip("\n\0 ")
    if raw_facts:
        snap.facts = facts.from_blocks(raw_facts)
    for n in sorted(raw_samples):
        s = raw_samples[n]
        threads = {(t.tid, t.start): t for t in stat_records(s.get("stat", ""))}
        m = re.match(r"\s*([\d.]+)", s.get("uptime", ""))
        snap.samples.append(
            Sample(uptime_s=float(m[1]) if m else 0.0, interrupts=s.get("interrupts", ""), threads=threads)
        )
    return snap


def take_snapshot(t: Transport, root: str = "", window_s: float = 0.0) -> Snapshot:
    """Read everything in one round trip; with window_s, also sample threads
    and interrupts twice, window_s apart."""
    root = root.rstrip("/")
    window = f"{window_s:g}" if window_s > 0 else "0"
    out = t.run(
        ["sh", "-c", _script(), "sh", root, window],
        check=True,
        timeout=window_s + 120,
        step="reading the target's /proc and /sys",
    ).stdout
    return parse_output(out, root)
