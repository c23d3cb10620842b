"""Parsers for the text the kernel shows in /proc and /sys (doctor, tune).

Each follows the format the kernel prints (the file is named in each
function); they take text, never paths, so they work on a board's files read
over SSH and on fixture trees alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...cpulist import NR_CPUS_MAX, CpuListError, format_cpulist, parse_cpulist, parse_cpumask, regions, shown, split
from ...errors import UserError

PF_KTHREAD = 0x00200000          # include/linux/sched.h: task->flags of kernel threads
SCHED_POLICIES = {0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline"}


# -- CPU sets ----------------------------------------------------------------
# CPU lists are parsed by rtforge.cpulist, the one parser of the program.
Unread = list[tuple[str, str, str]]     # (file, what it holds, why that is no CPU list)


def target_cpulist(value: str | None, source: str, unread: Unread, *, as_read: str | None = None,
                   last: int | None = None, mask: bool = False) -> set[int]:
    """A CPU list a target holds in `source` (`as_read`: the words it was
    read from, "isolcpus=..." of /proc/cmdline).  One that is no CPU list, or
    names a CPU no kernel has, is added to `unread` and read as no CPUs: a
    board, a copied tree or a --sysroot may hold anything, and what it holds
    is reported on, never a crash.  `mask`: a hex mask, not a list."""
    try:
        return parse_cpumask(value) if mask else parse_cpulist(value, last=last)
    except CpuListError as e:
        unread.append((source, shown(as_read or value or "", 60), str(e)))
        return set()


def user_cpulist(text: str, online: set[int], what: str = "--isolate") -> set[int]:
    """A CPU list given by the user, checked against the target's online CPUs
    (before a range is expanded: "0-99999999999" is refused, not filled in)."""
    last = max(online) if online else None
    try:
        found = regions(text, last)
    except CpuListError as e:
        raise UserError(f"{what} {shown(text)}: {e}; give CPUs like 3 or 2-3") from None
    if not found:
        raise UserError(f"{what} is empty: give the CPUs for real-time work, e.g. {what} 3")
    cpus, outside = split(found, NR_CPUS_MAX - 1 if last is None else last, online or None)
    if outside and not online:
        raise UserError(f"{what} {shown(text)} names CPU {outside}, beyond the highest CPU number there can be "
                        f"({NR_CPUS_MAX - 1})")
    if outside:
        raise UserError(f"{what} {shown(text)} names CPU {outside}, which this target does not have "
                        f"(online: {format_cpulist(online)})")
    if online and cpus >= online:
        raise UserError(f"{what} {shown(text)} would isolate every CPU: leave at least one for interrupts and "
                        "housekeeping")
    return cpus


# -- the kernel command line ---------------------------------------------------
def parse_cmdline(text: str) -> list[tuple[str, str | None]]:
    """/proc/cmdline as (name, value) pairs in order; a bare word has value None.
    Double quotes may hold spaces (Documentation/admin-guide/kernel-parameters.rst)."""
    pairs = []
    for word in re.findall(r'(?:[^\s"]+|"[^"]*")+', text):
        name, eq, value = word.partition("=")
        pairs.append((name, value.replace('"', "") if eq else None))
    return pairs


def cmdline_value(pairs: list[tuple[str, str | None]], name: str) -> str | None:
    """The last value of a parameter (the kernel keeps the last one)."""
    found = None
    for k, v in pairs:
        if k == name:
            found = v if v is not None else ""
    return found


def isolcpus_cpus(value: str | None, unread: Unread, last: int | None = None) -> set[int]:
    """isolcpus=[flag,...,]cpu-list (of /proc/cmdline): flags (nohz, domain,
    managed_irq, or any word of letters, which the kernel skips) come first."""
    if not value:
        return set()
    parts = value.split(",")
    while parts and re.fullmatch(r"[A-Za-z_]+", parts[0]):
        parts.pop(0)
    return target_cpulist(",".join(parts), "/proc/cmdline", unread, as_read=f"isolcpus={value}", last=last)


# -- kernel config ---------------------------------------------------------------
def parse_kconfig(text: str) -> dict[str, str]:
    """.config text: CONFIG_X -> "y" / "m" / value; "# CONFIG_X is not set" -> "n"."""
    out = {}
    for line in text.splitlines():
        if line.startswith("CONFIG_"):
            k, _, v = line.partition("=")
            out[k] = v.strip('"')
        else:
            m = re.match(r"# (CONFIG_\w+) is not set", line)
            if m:
                out[m[1]] = "n"
    return out


# -- /proc/<pid>/limits -----------------------------------------------------------
def parse_limits(text: str) -> dict[str, tuple[str, str]]:
    """'Max realtime priority   0   0' -> {"Max realtime priority": ("0", "0")}:
    fixed-width columns, name up to column 26 (fs/proc/base.c proc_pid_limits)."""
    out = {}
    for line in text.splitlines()[1:]:
        name, rest = line[:26].strip(), line[26:].split()
        if name and len(rest) >= 2:
            out[name] = (rest[0], rest[1])
    return out


# -- /proc/<pid>/task/<tid>/stat --------------------------------------------------
@dataclass(frozen=True)
class ThreadStat:
    tid: int
    comm: str
    ticks: int          # utime + stime, in clock ticks (USER_HZ)
    start: int          # start time in ticks since boot: (tid, start) names a thread
    flags: int
    policy: str
    rt_priority: int
    cpu: int            # the CPU it last ran on

    @property
    def kernel(self) -> bool:
        return bool(self.flags & PF_KTHREAD)


# One stat record in a stream of them (cat /proc/*/task/*/stat): a thread's
# name is at most 15 bytes (TASK_COMM_LEN; a kernel thread's, up to 63 in
# newer kernels) and may hold anything but NUL -- "\n" and ")" too -- and
# at least 40 numbers follow its state on the same line, which no name can
# fake.  Splitting the stream at newlines lost a thread named "x\ny": a busy
# one could hide from doctor that way.
_STAT_RECORD = re.compile(r"(?m)^\d+ \(.{0,64}?\) [A-Za-z] (?:-?\d+ ){40,}-?\d+$", re.S)


def stat_records(text: str) -> list[ThreadStat]:
    """The threads of concatenated stat files, whatever their names hold."""
    return [t for m in _STAT_RECORD.finditer(text) if (t := parse_stat_line(m[0]))]


def parse_stat_line(line: str) -> ThreadStat | None:
    """One stat line (proc(5)): the command name may hold spaces and ')', so
    the fields after it are counted from the last ')'."""
    try:
        head, _, rest = line.rpartition(")")
        tid_s, _, comm = head.partition(" (")
        f = rest.split()
        return ThreadStat(tid=int(tid_s), comm=comm, ticks=int(f[11]) + int(f[12]), start=int(f[19]),
                          flags=int(f[6]), policy=SCHED_POLICIES.get(int(f[38]), f[38]), rt_priority=int(f[37]),
                          cpu=int(f[36]))
    except (ValueError, IndexError):
        return None


# -- /proc/interrupts -----------------------------------------------------------
@dataclass
class Irq:
    number: str          # "62", or "LOC", "IPI0" for the architecture's own rows
    counts: dict[int, int] = field(default_factory=dict)   # per CPU
    chip: str = ""
    hwirq: int | None = None
    names: list[str] = field(default_factory=list)           # the handlers' names (the device)

    @property
    def label(self) -> str:
        return ", ".join(self.names) or self.chip or self.number


# "GICv2  30 Level     arch_timer", "IO-APIC   5-edge      ACPI:Ged", "BRCM STB PCIe MSI 524288 Edge  xhci_hcd"
_IRQ_TAIL = re.compile(r"^(?P<chip>.+?)\s+(?P<hwirq>\d+)(?:\s+|-)(?P<type>[Ee]dge|[Ll]evel|fasteoi)\s+(?P<names>.*)$")


def parse_interrupts(text: str) -> list[Irq]:
    """/proc/interrupts (kernel/irq/proc.c show_interrupts): a header of the
    online CPUs, then one row per IRQ: count per CPU, chip, hwirq, type, the
    handlers' names joined by ', '."""
    lines = text.splitlines()
    if not lines:
        return []
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU")]
    out = []
    for line in lines[1:]:
        label, sep, rest = line.partition(":")
        if not sep:
            continue
        tokens = rest.split()
        counts = {}
        for cpu, tok in zip(cpus, tokens):
            if not tok.isdigit():
                break
            counts[cpu] = int(tok)
        tail = " ".join(tokens[len(counts):])
        irq = Irq(number=label.strip(), counts=counts)
        m = _IRQ_TAIL.match(tail)
        if m:
            irq.chip, irq.hwirq = m["chip"], int(m["hwirq"])
            irq.names = [n.strip() for n in m["names"].split(", ") if n.strip()]
        elif irq.number.isdigit():
            irq.names = [tail] if tail else []
        else:
            irq.chip = tail
        out.append(irq)
    return out


# -- Raspberry Pi firmware ------------------------------------------------------
# vcgencmd get_throttled / soc:firmware/get_throttled bits (Raspberry Pi documentation)
THROTTLE_BITS = {0: "under-voltage", 1: "ARM frequency capped", 2: "throttled", 3: "soft temperature limit"}


def throttled_now(value: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if value >> bit & 1]


def throttled_since_boot(value: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if value >> (bit + 16) & 1]


def parse_throttled(text: str) -> int | None:
    """'throttled=0x50005' (vcgencmd) or '50005' (sysfs, printed with %x)."""
    m = re.search(r"(?:throttled=)?(?:0x)?([0-9a-fA-F]+)\s*$", text.strip())
    return int(m[1], 16) if m else None
