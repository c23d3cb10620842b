"""The operations of `rtforge tune`, each of one shape (pyperf's `system
tune` is the model): from a snapshot of the target, an operation plans a
list of ``Change``s -- one setting each, with the value now and the value it
wants -- and says why it has nothing to do.  The engine (engine.py)
saves the values before, writes the changes through the writer of their
kind, reads them back, and reverts them from the saved state.

Runtime operations write files in /proc and /sys (kind "file") or ask the
Wi-Fi driver (kind "wifi"); they take effect at once and are gone after a
reboot.  The boot-time operation (isolcpus, nohz_full, rcu_nocbs,
irqaffinity, the dwc_otg FIQ) plans changes of kind "cmdline" the same way:
one per parameter, the word wanted against the word in /proc/cmdline; they
are written as a command line tried once (boottime.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...cpulist import format_cpulist, format_cpumask
from ..doctor.checks_kernel import dwc_otg_fiq, per_cpu_irq
from ..doctor.findings import Context
from ..state.procparse import Unread, cmdline_value, isolcpus_cpus, parse_cmdline, parse_interrupts, target_cpulist
from ..state.snapshot import Snapshot

ONLINE = "/sys/devices/system/cpu/online"


@dataclass
class Change:
    op: str
    kind: str               # the writer: "file" (a path below the root), "wifi" (an interface)
    target: str
    before: str | None      # the value now (None: not there)
    wanted: str
    label: str = ""         # for people: "IRQ 62 dwc_otg", "policy0 (CPUs 0-3)"

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.target}"


class Operation:
    name = ""
    title = ""
    boot = False            # True: takes effect after a (tried) reboot; False: at once
    isolates = False        # True: works from the isolated CPUs (a list it could not read matters to it)

    def plan(self, snap: Snapshot, isolate: set[int]) -> tuple[list[Change], list[str]]:
        """The changes this operation wants now, and notes (why nothing, what it cannot do)."""
        raise NotImplementedError


class Governor(Operation):
    name = "governor"
    title = "CPU frequency governor to performance"

    def plan(self, snap: Snapshot, isolate: set[int]) -> tuple[list[Change], list[str]]:
        changes, notes = [], []
        paths = snap.glob("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor")
        if not paths:
            return [], ["no cpufreq policies: the clock is fixed or set by the firmware"]
        for path in paths:
            base = path.rsplit("/", 1)[0]
            policy = base.rsplit("/", 1)[1]
            cpus = (snap.value(base + "/affected_cpus") or "").split()
            numbers = {int(c) for c in cpus if c.isascii() and c.isdigit()}
            label = f"{policy} (CPU {format_cpulist(numbers)})" if cpus else policy
            now = snap.value(path)
            if now == "performance":
                continue
            available = (snap.value(base + "/scaling_available_governors") or "").split()
            if available and "performance" not in available:
                notes.append(f"{label}: no performance governor (available: {' '.join(available)})")
                continue
            changes.append(Change(self.name, "file", path, now, "performance", label))
        return changes, notes


class IrqAffinity(Operation):
    name = "irq-affinity"
    title = "interrupts off the isolated CPUs"
    isolates = True

    def plan(self, snap: Snapshot, isolate: set[int]) -> tuple[list[Change], list[str]]:
        if not isolate:
            return [], ["no CPUs to keep free of interrupts: none is isolated; name them with --isolate CPUS"]
        unread: Unread = []
        online = target_cpulist(snap.value(ONLINE), ONLINE, unread)
        housekeeping = online - isolate
        irqs = {i.number: i for i in parse_interrupts(snap.text("/proc/interrupts") or "")}
        changes, notes, fixed = [], [], []
        for path in snap.glob("/proc/irq/*/smp_affinity_list"):
            number = path.split("/")[3]
            irq = irqs.get(number)
            if irq and per_cpu_irq(irq):
                fixed.append(number)
                continue
            now = snap.value(path) or ""
            cpus = target_cpulist(now, path, unread)         # one it cannot read is left as it is
            if cpus & isolate:
                wanted = (cpus - isolate) or housekeeping
                changes.append(Change(self.name, "file", path, now, format_cpulist(wanted),
                                      f"IRQ {number} {irq.label if irq else ''}".strip()))
        default = snap.value("/proc/irq/default_smp_affinity")
        mask = target_cpulist(default, "/proc/irq/default_smp_affinity", unread, mask=True)
        if default is not None and mask & isolate:
            wanted = (mask - isolate) or housekeeping
            changes.append(Change(self.name, "file", "/proc/irq/default_smp_affinity", default,
                                  format_cpumask(wanted), "new interrupts (default_smp_affinity)"))
        if fixed:
            notes.append(f"IRQ {', '.join(fixed)}: per-CPU interrupts (each CPU has its own), not movable")
        return changes, notes + unread_notes(unread)


class RtThrottling(Operation):
    name = "rt-throttling"
    title = "RT throttling off"

    def plan(self, snap: Snapshot, isolate: set[int]) -> tuple[list[Change], list[str]]:
        path = "/proc/sys/kernel/sched_rt_runtime_us"
        now = snap.value(path)
        if now is None:
            return [], ["no sched_rt_runtime_us on this kernel"]
        if now == "-1":
            return [], []
        return [Change(self.name, "file", path, now, "-1", "sched_rt_runtime_us")], []


class WifiPowerSave(Operation):
    name = "wifi-power-save"
    title = "Wi-Fi power save off"

    def plan(self, snap: Snapshot, isolate: set[int]) -> tuple[list[Change], list[str]]:
        changes, notes = [], []
        if not snap.wireless:
            return [], ["no Wi-Fi interface"]
        for iface in snap.wireless:
            out = snap.command(f"iw:{iface}")
            if out is None:
                notes.append(f"{iface}: power save not readable (install iw: sudo apt install iw)")
                continue
            m = re.search(r"Power save:\s*(on|off)", out)
            if m and m[1] == "on":
                changes.append(Change(self.name, "wifi", iface, "on", "off", f"{iface} power save"))
        return changes, notes


class BootCmdline(Operation):
    name = "boot-cmdline"
    title = "isolation on the kernel command line (tried once at a reboot)"
    boot = True
    isolates = True

    def plan(self, snap: Snapshot, isolate: set[int]) -> tuple[list[Change], list[str]]:
        words = []
        unread: Unread = []
        if isolate:
            online = target_cpulist(snap.value(ONLINE), ONLINE, unread)
            cpus = format_cpulist(isolate)
            # isolcpus= alone still lets the tick and RCU callbacks run there;
            # managed_irq: interrupts the kernel manages (multi-queue devices) refuse a runtime move, so
            # only boot can keep them off (doctor's irq-on-isolated fix says the same);
            # irqaffinity= is where the other interrupts go from boot on (before tune's runtime move)
            words += [f"isolcpus=managed_irq,domain,{cpus}", f"nohz_full={cpus}", f"rcu_nocbs={cpus}"]
            if online - isolate:
                words.append(f"irqaffinity={format_cpulist(online - isolate)}")
        if dwc_otg_fiq(Context(snap)):       # doctor's finding: the FIQ is on under an RT kernel
            words += ["dwc_otg.fiq_enable=0", "dwc_otg.fiq_fsm_enable=0"]
        have = parse_cmdline(snap.value("/proc/cmdline") or "")
        changes = []
        for w in words:
            key, value = w.split("=", 1)
            now = cmdline_value(have, key)
            if now != value:
                changes.append(Change(self.name, "cmdline", key, None if now is None else f"{key}={now}", w, key))
        notes = [] if isolate else ["no CPUs to isolate at boot: name them with --isolate CPUS"]
        return changes, notes + unread_notes(unread)


OPERATIONS: list[Operation] = [Governor(), IrqAffinity(), RtThrottling(), WifiPowerSave(), BootCmdline()]


def operation_names() -> list[str]:
    return [op.name for op in OPERATIONS]


def boot_isolated(snap: Snapshot, unread: Unread) -> set[int]:
    """CPUs the kernel isolated at boot (isolated, isolcpus=, nohz_full)."""
    found: set[int] = set()
    for path in ("/sys/devices/system/cpu/isolated", "/sys/devices/system/cpu/nohz_full"):
        found |= target_cpulist(snap.value(path), path, unread)
    online = target_cpulist(snap.value(ONLINE), ONLINE, unread)
    isolcpus = cmdline_value(parse_cmdline(snap.value("/proc/cmdline") or ""), "isolcpus")
    return found | isolcpus_cpus(isolcpus, unread, max(online) if online else None)


def unread_notes(unread: Unread) -> list[str]:
    """What tune says of a CPU list it could not read, once each."""
    return [f"{source}: {value} is not a CPU list the kernel reads ({why}); taken as no CPUs"
            for source, value, why in dict.fromkeys(unread)]
