"""Doctor's checks of the kernel itself: preemption model, its config (HZ,
NO_HZ_FULL, RCU_NOCB_CPU), the isolation parameters on its command line and
whether they agree, interrupts on isolated CPUs, the console, the Pi's USB FIQ."""

from __future__ import annotations

import re

from ...units import plural
from ..state.procparse import parse_interrupts, target_cpulist
from .findings import Context, Evidence, Finding, cpus_text, threshold

# Serial console drivers (Documentation/admin-guide/serial-console.rst; the
# Pi firmware turns serial0 into ttyS0 or ttyAMA0 before the kernel sees it).
_SERIAL = re.compile(r"^(ttyS|ttyAMA|serial|ttyO|ttymxc|ttySAC|ttyPS|ttyLP|ttyMSM|ttySC)\d+$")
# Interrupts bound to one CPU each, which no affinity setting moves: GIC
# private interrupts (INTID < 32), the Pi 2/3 per-core controller, and the
# PMU's per-core SPIs (the arm-pmu driver pins each to its own CPU).
_PER_CPU_CHIPS = ("bcm2836-timer", "bcm2836-pmu")
_PER_CPU_NAMES = ("arm-pmu",)


def kernel_preemption(ctx: Context) -> list[Finding]:
    if ctx.is_rt:
        return []
    ev = [ctx.ev("/proc/sys/kernel/version"), ctx.ev("/sys/kernel/realtime")]
    if ctx.kconfig_source:
        ev.append(Evidence(ctx.kconfig_source[0], ctx.kconfig_line("CONFIG_PREEMPT_RT")))
    variant = "pi" if ctx.is_pi else ("dynamic" if ctx.preempt == "dynamic" else None)
    return [ctx.finding("kernel-not-rt", ev, variant, preempt=ctx.preempt, debarch=ctx.debarch)]


def kernel_config(ctx: Context) -> list[Finding]:
    if not ctx.kconfig_source:
        return [ctx.finding("kernel-config-unknown",
                            [Evidence("/proc/config.gz", "(not there)"),
                             Evidence(f"/boot/config-{ctx.release}", "(not there)")], release=ctx.release)]
    where = ctx.kconfig_source[0]
    out = []
    if ctx.hz and ctx.hz < threshold("low_hz"):
        out.append(ctx.finding("hz-low", [Evidence(where, ctx.kconfig_line("CONFIG_HZ"))], hz=ctx.hz))
    asked = ctx.param("nohz_full")
    if asked and ctx.kconfig("CONFIG_NO_HZ_FULL") != "y":
        out.append(ctx.finding("nohz-full-unsupported",
                               [ctx.ev("/proc/cmdline", f"nohz_full={asked}"),
                                Evidence(where, ctx.kconfig_line("CONFIG_NO_HZ_FULL"))],
                               nohz_full=asked))
    return out


def isolation(ctx: Context) -> list[Finding]:
    """Boot-time isolation that is only half done."""
    isolated = ctx.isolated_boot
    if not isolated:
        return []
    out = []
    ev_iso = [ctx.ev("/sys/devices/system/cpu/isolated"), ctx.ev("/proc/cmdline", _params(ctx, "isolcpus"))]
    missing = isolated - ctx.nohz_full
    if missing:
        variant = "noconfig" if ctx.kconfig("CONFIG_NO_HZ_FULL") == "n" else None
        out.append(ctx.finding("isolated-not-nohz-full", ev_iso + [ctx.ev("/sys/devices/system/cpu/nohz_full")],
                               variant, cpus=cpus_text(missing), them="it" if len(missing) == 1 else "them"))
    nocbs = ctx.param_cpus("rcu_nocbs")
    if ctx.kconfig("CONFIG_RCU_NOCB_CPU") == "n":
        nocbs = set()          # the parameter is ignored without the option
    offloaded = nocbs | ctx.nohz_full
    missing = isolated - offloaded
    if missing:
        variant = "noconfig" if ctx.kconfig("CONFIG_RCU_NOCB_CPU") == "n" else None
        out.append(ctx.finding("isolated-not-rcu-nocbs",
                               ev_iso + [ctx.ev("/proc/cmdline", _params(ctx, "rcu_nocbs", "nohz_full"))],
                               variant, cpus=cpus_text(missing)))
    return out


def _params(ctx: Context, *names: str) -> str:
    found = [f"{k}={v}" if v is not None else k for k, v in ctx.cmdline if k in names]
    return " ".join(found) or f"(no {', '.join(n + '=' for n in names)})"


def per_cpu_irq(irq) -> bool:
    if irq.chip in _PER_CPU_CHIPS or any(n in _PER_CPU_NAMES for n in irq.names):
        return True
    return irq.chip.startswith("GIC") and irq.hwirq is not None and irq.hwirq < 32


def irqs_on_isolated(ctx: Context) -> list[Finding]:
    isolated = ctx.isolated
    if not isolated:
        return []
    irqs = {i.number: i for i in parse_interrupts(ctx.snap.text("/proc/interrupts") or "")}
    ev, names = [], []
    for path in ctx.snap.glob("/proc/irq/*/smp_affinity_list"):
        number = path.split("/")[3]
        irq = irqs.get(number)
        if irq and per_cpu_irq(irq):
            continue
        affinity = ctx.cpus(path)
        if affinity & isolated:
            fired = sum(irq.counts.get(c, 0) for c in affinity & isolated) if irq else 0
            label = irq.label if irq else "no handler"
            ev.append(
                Evidence(
                    path,
                    f"{ctx.snap.value(path)}  ({label}; {fired} on CPU {cpus_text(affinity & isolated)} since boot)",
                )
            )
            names.append(f"{number} {label}")
    default = ctx.snap.value("/proc/irq/default_smp_affinity")
    if default is not None and target_cpulist(default, "/proc/irq/default_smp_affinity", ctx.unread,
                                              mask=True) & isolated:
        ev.append(Evidence("/proc/irq/default_smp_affinity", f"{default}  (new interrupts)"))
    if not ev:
        return []
    housekeeping = (ctx.online or set()) - isolated
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return [
        ctx.finding(
            "irq-on-isolated",
            ev,
            interrupts=plural(len(names), "interrupt"),
            cpus=cpus_text(isolated),
            irqs=shown or "new interrupts (default_smp_affinity)",
            housekeeping=cpus_text(housekeeping) or "0",
        )
    ]


def serial_console(ctx: Context) -> list[Finding]:
    registered = ctx.snap.text("/proc/consoles")
    active = {line.split()[0] for line in (registered or "").splitlines() if line.strip()}
    printk = (ctx.snap.value("/proc/sys/kernel/printk") or "").split()
    loglevel = int(printk[0]) if printk and printk[0].isdigit() else None
    quiet = loglevel is not None and loglevel <= 4 or ctx.param("quiet") is not None
    out = []
    for k, v in ctx.cmdline:
        if k != "console" or not v:
            continue
        port, _, options = v.partition(",")
        if not _SERIAL.match(port) or (registered is not None and port not in active and not port.startswith("serial")):
            continue
        m = re.match(r"\d+", options)
        baud = int(m[0]) if m else 9600  # serial-console.rst: the default is 9600n8
        if baud > threshold("slow_console_baud"):
            continue
        ev = [ctx.ev("/proc/cmdline", f"console={v}")]
        if registered is not None:
            ev.append(
                Evidence(
                    "/proc/consoles",
                    next(
                        (ln.strip() for ln in registered.splitlines() if ln.split()[:1] == [port]),
                        f"{port} (not registered)",
                    ),
                )
            )
        if loglevel is not None:
            ev.append(ctx.ev("/proc/sys/kernel/printk"))
        fid = "serial-console-quiet" if quiet else "serial-console"
        out.append(ctx.finding(fid, ev, port=port, baud=baud, param=v, char_us=10 / baud * 1e6))
    return out


def dwc_otg_fiq(ctx: Context) -> list[Finding]:
    base = "/sys/module/dwc_otg/parameters/"
    fiq, fsm = ctx.snap.value(base + "fiq_enable"), ctx.snap.value(base + "fiq_fsm_enable")
    if fiq is None or not ctx.is_rt:
        return []
    if not ({fiq, fsm} & {"Y", "1"}):  # bool module parameters read Y or N
        return []
    return [
        ctx.finding(
            "dwc-otg-fiq", [ctx.ev(base + "fiq_enable"), ctx.ev(base + "fiq_fsm_enable")], fiq=fiq, fsm=fsm or "?"
        )
    ]


def cpu_lists_unread(ctx: Context) -> list[Finding]:
    """The CPU lists the other checks could not read (Context.unread): run
    after them all, since each check reads the lists it needs."""
    rows = list(dict.fromkeys(ctx.unread))       # a list read by two checks is named once
    if not rows:
        return []
    ev = [Evidence(source, f"{value}  ({why})") for source, value, why in rows]
    where = [f"{value} in {source}" if source == "/proc/cmdline" else source for source, value, _ in rows]
    shown = ", ".join(where[:2]) + (f" and {len(where) - 2} more" if len(where) > 2 else "")
    return [ctx.finding("cpu-list-unreadable", ev, what=shown)]


CHECKS = [kernel_preemption, kernel_config, isolation, irqs_on_isolated, serial_console, dwc_otg_fiq]
