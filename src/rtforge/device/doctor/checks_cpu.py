"""Doctor's checks of what the CPUs do: RT throttling, frequency governors,
idle states and /dev/cpu_dma_latency, busy threads measured over a window,
temperature and the Raspberry Pi firmware's throttling."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ...units import format_us
from ..state.procparse import parse_interrupts, parse_throttled, throttled_now, throttled_since_boot
from ..state.snapshot import Snapshot
from .findings import Context, Evidence, Finding, threshold


def rt_throttling(ctx: Context) -> list[Finding]:
    runtime = ctx.snap.number("/proc/sys/kernel/sched_rt_runtime_us")
    period = ctx.snap.number("/proc/sys/kernel/sched_rt_period_us")
    if runtime is None or period is None or runtime < 0 or runtime >= period:
        return []
    return [ctx.finding("rt-throttling", [ctx.ev("/proc/sys/kernel/sched_rt_runtime_us"),
                                          ctx.ev("/proc/sys/kernel/sched_rt_period_us")],
                        runtime_us=runtime, period_us=period, idle_ms=f"{(period - runtime) / 1000:g}",
                        period_ms=f"{period / 1000:g}", runtime_pct=f"{100 * runtime / period:g}")]


def governors(ctx: Context) -> list[Finding]:
    out = []
    slow = []
    for path in ctx.snap.glob("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor"):
        gov = ctx.snap.value(path)
        if gov and gov != "performance":
            slow.append((path, gov))
    if slow:
        names = sorted({g for _, g in slow})
        out.append(ctx.finding("governor", [ctx.ev(p) for p, _ in slow], governors=" and ".join(names)))
    for path in ctx.snap.glob("/sys/devices/system/cpu/cpufreq/policy*/scaling_max_freq"):
        base = path.rsplit("/", 1)[0]
        cap, hw = ctx.snap.number(path), ctx.snap.number(base + "/cpuinfo_max_freq")
        if cap and hw and cap < hw:
            out.append(ctx.finding("frequency-capped", [ctx.ev(path), ctx.ev(base + "/cpuinfo_max_freq")],
                                   policy=base.rsplit("/", 1)[1], max_khz=cap, hw_max_khz=hw))
            break
    return out


def dma_latency_holders(snap: Snapshot) -> list[int]:
    """pids that have /dev/cpu_dma_latency open (the snapshot's "fds": one
    /proc/PID/fd/N per open file description of it)."""
    pids: list[int] = []
    for line in (snap.command("fds") or "").splitlines():
        m = re.fullmatch(r"/proc/(\d+)/fd/\d+", line)
        if m and int(m[1]) not in pids:
            pids.append(int(m[1]))
    return pids


def _comm(snap: Snapshot, pid: int) -> str:
    for s in reversed(snap.samples):
        for (tid, _), t in s.threads.items():
            if tid == pid:
                return t.comm
    return "?"


def idle_states(ctx: Context) -> list[Finding]:
    limit = threshold("deep_idle_latency_us")
    deep: dict[str, int] = {}
    ev: list[tuple[int, Evidence]] = []
    for path in ctx.snap.glob("/sys/devices/system/cpu/cpu*/cpuidle/state*/latency"):
        base = path.rsplit("/", 1)[0]
        latency = ctx.snap.number(path)
        if latency is None or latency <= limit or ctx.snap.value(base + "/disable") == "1":
            continue
        name = ctx.snap.value(base + "/name") or base.rsplit("/", 1)[1]
        if name not in deep:
            ev.append((latency, Evidence(base, f"{name}: latency {us_text(latency)}, disable "
                                                 f"{ctx.snap.value(base + '/disable')}")))
        deep[name] = max(deep.get(name, 0), latency)
    if not deep:
        return []
    out = (ctx.snap.command("dma_latency") or "").split()
    value = int(out[0]) if out and out[0].lstrip("-").isdigit() else None
    holders = dma_latency_holders(ctx.snap)
    if value is not None:
        # the idle governor only picks states whose exit latency is within the
        # PM QoS limit: the deeper ones are out of reach while it is held
        deep = {n: lat for n, lat in deep.items() if lat <= value}
        ev = [(lat, e) for lat, e in ev if lat <= value]
        if not deep:
            return []
    if value is None:
        holder = "who holds /dev/cpu_dma_latency is unknown (reading it needs root)"
    elif holders:
        who = ", ".join(f"pid {p} ({_comm(ctx.snap, p)})" for p in holders)
        holder = f"/dev/cpu_dma_latency is held at {us_text(value)} by {who}, which leaves them usable"
    else:
        holder = "nothing holds /dev/cpu_dma_latency"
    evidence = [e for _, e in ev]
    evidence.append(Evidence("/dev/cpu_dma_latency", "unknown (needs root)" if value is None else
                             us_text(value) + (f", open in pid {', '.join(map(str, holders))}" if holders
                                               else ", not open")))
    return [ctx.finding("deep-idle", evidence, max_latency=us_text(max(deep.values())),
                        states=", ".join(f"{n} {us_text(lat)}" for n, lat in deep.items()), holder=holder,
                        limit_us=limit)]


def us_text(us: int) -> str:
    """A latency the kernel states in whole µs, written as every rtforge table writes one: '1,042 µs'."""
    return format_us(us * 1000, unit=True, decimals=0)


@dataclass
class ThreadUse:
    tid: int
    comm: str
    kind: str            # irq | kernel | user
    policy: str
    rt_priority: int
    cpu: int
    ticks: int           # utime + stime used during the window
    share_pct: float     # of one CPU

    def to_dict(self) -> dict:
        return asdict(self)


def measure_threads(snap: Snapshot) -> tuple[float, list[ThreadUse]]:
    """CPU time each thread used between the two samples, busiest first."""
    if len(snap.samples) < 2:
        return 0.0, []
    a, b = snap.samples[0], snap.samples[-1]
    window_s = b.uptime_s - a.uptime_s
    if window_s <= 0:
        return 0.0, []
    out = []
    for key, t in b.threads.items():
        before = a.threads.get(key)
        if before is None or t.ticks <= before.ticks:
            continue
        kind = "irq" if t.kernel and t.comm.startswith("irq/") else "kernel" if t.kernel else "user"
        used = t.ticks - before.ticks
        out.append(ThreadUse(t.tid, t.comm, kind, t.policy, t.rt_priority, t.cpu, used,
                             round(100 * used / snap.clk_tck / window_s, 1)))
    return window_s, sorted(out, key=lambda u: -u.ticks)


def busy_threads(ctx: Context) -> list[Finding]:
    window_s, used = measure_threads(ctx.snap)
    irq_names = {i.number: i.label for i in parse_interrupts(ctx.snap.text("/proc/interrupts") or "")}
    out = []
    for u in used:
        sched = f"SCHED_{u.policy.upper()}" + (f" {u.rt_priority}" if u.rt_priority else "")
        ev = [Evidence(f"/proc/*/task/{u.tid}/stat over {window_s:.2f} s",
                       f"{u.ticks} ticks of {ctx.snap.clk_tck}/s = {u.share_pct:.1f} % of CPU {u.cpu}, {sched}")]
        common = {
            "thread": u.comm, "tid": u.tid, "share_pct": u.share_pct, "cpu": u.cpu, "window_s": round(window_s, 2),
        }
        if u.kind in ("irq", "kernel") and u.share_pct >= threshold("busy_irq_thread_pct"):
            m = re.match(r"irq/(\d+)-", u.comm)
            if m and "dwc_otg" in u.comm:
                ev.append(ctx.ev("/sys/module/dwc_otg/parameters/fiq_enable"))
                out.append(ctx.finding("dwc-otg-irq-busy", ev, prio=u.rt_priority or 50, **common))
                continue
            device = irq_names.get(m[1], f"IRQ {m[1]}") if m else "none: a kernel thread"
            if m:
                ev.append(ctx.ev(f"/proc/irq/{m[1]}/smp_affinity_list"))
            out.append(
                ctx.finding(
                    "busy-irq-thread",
                    ev,
                    kind="IRQ thread" if m else "kernel thread",
                    sched=sched,
                    device=device,
                    **common,
                )
            )
        elif u.kind == "user" and u.share_pct >= threshold("busy_thread_pct") and len(out) < 8:
            out.append(ctx.finding("busy-thread", ev, **common))
    return out


_REMEDY_POWER = (
    "use a supply that holds 5 V under load (the official 5.1 V 3 A supply for a Pi 4, 5 V 5 A for a "
    "Pi 5) and a short, thick cable"
)
_REMEDY_HEAT = "cool it: a heatsink or fan, an open case"


def pi_throttling(ctx: Context) -> list[Finding]:
    raw = ctx.snap.command("vcgencmd")
    if raw is not None:
        ev = Evidence("vcgencmd get_throttled", raw.strip())
    else:
        path = "/sys/devices/platform/soc/soc:firmware/get_throttled"
        raw = ctx.snap.value(path)
        if raw is None:
            return []
        ev = ctx.ev(path)
    value = parse_throttled(raw)
    if value is None:
        return []
    out = []
    for fid, flags in (
        ("pi-throttled-now", throttled_now(value)),
        ("pi-throttled-since-boot", throttled_since_boot(value)),
    ):
        if not flags:
            continue
        remedy = [_REMEDY_POWER] if "under-voltage" in flags else []
        if "soft temperature limit" in flags or not remedy:
            remedy.append(_REMEDY_HEAT)
        out.append(
            ctx.finding(
                fid,
                [Evidence(ev.source, f"{ev.value}  (0x{value:x})")],
                flags=", ".join(flags),
                remedy="; ".join(remedy),
            )
        )
    if len(out) == 2 and throttled_now(value) == throttled_since_boot(value):
        out.pop()  # the same flags now and since boot: say it once
    return out


def temperature(ctx: Context) -> list[Finding]:
    out = []
    for path in ctx.snap.glob("/sys/class/thermal/thermal_zone*/temp"):
        base = path.rsplit("/", 1)[0]
        temp = ctx.snap.number(path)
        if temp is None:
            continue
        zone = ctx.snap.value(base + "/type") or base.rsplit("/", 1)[1]
        limit, limit_src = _soft_limit(ctx, base)
        if limit is None:
            continue
        ev = [ctx.ev(path), Evidence(limit_src, f"{limit / 1000:g} C")]
        params = {"zone": zone, "temp_c": temp / 1000, "limit_c": limit / 1000}
        if temp >= limit:
            out.append(ctx.finding("temperature", ev, **params))
        elif temp >= limit - threshold("temp_margin_mc"):
            out.append(ctx.finding("temperature-close", ev, **params))
    return out


def _soft_limit(ctx: Context, zone: str) -> tuple[int | None, str]:
    """The Pi firmware's soft limit; elsewhere the zone's lowest passive trip point."""
    if ctx.is_pi:
        if (ctx.model or "").startswith(("Raspberry Pi 3 Model B Plus", "Raspberry Pi 3 Model A Plus")):
            return threshold("soft_limit_mc_pi3plus"), "Pi 3+ firmware temp_soft_limit default"
        return threshold("soft_limit_mc"), "Raspberry Pi firmware: ARM cores throttled from"
    trips = []
    for p in ctx.snap.glob(zone + "/trip_point_*_type"):
        if ctx.snap.value(p) == "passive":
            t = ctx.snap.number(p.replace("_type", "_temp"))
            if t:
                trips.append((t, p.replace("_type", "_temp")))
    return min(trips) if trips else (None, "")


CHECKS = [rt_throttling, governors, idle_states, busy_threads, pi_throttling, temperature]
