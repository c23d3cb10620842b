"""Doctor's checks of the system around the RT threads: the login's rtprio
and memlock limits, swap, Wi-Fi power save."""

from __future__ import annotations

import re

from ..state.procparse import parse_limits
from .findings import Context, Evidence, Finding, threshold

_LIMIT_FILES = ("/etc/security/limits.conf", "/etc/security/limits.d/*.conf")


def _limit_lines(ctx: Context, item: str) -> list[Evidence]:
    """The configured lines for an item (pam_limits reads them at login)."""
    ev = []
    for pattern in _LIMIT_FILES:
        for path in ctx.snap.glob(pattern):
            for line in (ctx.snap.text(path) or "").splitlines():
                fields = line.split("#", 1)[0].split()
                if len(fields) >= 4 and fields[2] == item:
                    ev.append(Evidence(path, line.strip()))
    return ev


def login_limits(ctx: Context) -> list[Finding]:
    """RLIMIT_RTPRIO and RLIMIT_MEMLOCK of the login (root is not bound by them:
    CAP_SYS_NICE and CAP_IPC_LOCK)."""
    text = ctx.snap.text("/proc/self/limits")
    if text is None or ctx.snap.is_root:
        return []
    limits = parse_limits(text)
    out = []
    rtprio = limits.get("Max realtime priority")
    if rtprio and rtprio[1] != "unlimited" and int(rtprio[1]) < 1:
        ev = [Evidence("/proc/self/limits", f"Max realtime priority {rtprio[0]} {rtprio[1]}")]
        out.append(ctx.finding("rtprio-limit", ev + _limit_lines(ctx, "rtprio"), user=ctx.snap.user,
                               rtprio=rtprio[1]))
    memlock = limits.get("Max locked memory")
    if memlock and memlock[0] != "unlimited" and int(memlock[0]) < threshold("memlock_min_kb") * 1024:
        ev = [Evidence("/proc/self/limits", f"Max locked memory {memlock[0]} {memlock[1]} bytes")]
        out.append(ctx.finding("memlock-limit", ev + _limit_lines(ctx, "memlock"), user=ctx.snap.user,
                               memlock=f"{int(memlock[0]) // 1024} KiB"))
    return out


def swap(ctx: Context) -> list[Finding]:
    lines = (ctx.snap.text("/proc/swaps") or "").splitlines()[1:]
    active = [line.split() for line in lines if line.strip()]
    if not active:
        return []
    ev = [Evidence("/proc/swaps", " ".join(f[:4])) for f in active]
    ev.append(ctx.ev("/proc/sys/vm/swappiness"))
    dphys = any(f[0] == "/var/swap" for f in active)   # Raspberry Pi OS's dphys-swapfile
    return [ctx.finding("swap", ev, "dphys" if dphys else None,
                        devices=", ".join(f"{f[0]} ({int(f[2]) // 1024} MiB)" for f in active if f[2].isdigit()))]


def wifi_power_save(ctx: Context) -> list[Finding]:
    on, ev, unknown = [], [], []
    for iface in ctx.snap.wireless:
        iw = ctx.snap.command(f"iw:{iface}")
        iwc = ctx.snap.command(f"iwconfig:{iface}")
        if iw is not None:
            ev.append(Evidence(f"iw dev {iface} get power_save", iw.strip()))
            if re.search(r"Power save:\s*on", iw):
                on.append(iface)
        elif iwc is not None:
            m = re.search(r"Power Management:\s*(\w+)", iwc)
            ev.append(Evidence(f"iwconfig {iface}", m[0] if m else iwc.strip()[:80]))
            if m and m[1].lower() == "on":
                on.append(iface)
        elif f"iw:{iface}" in ctx.snap.commands or f"iwconfig:{iface}" in ctx.snap.commands:
            failed = ctx.snap.commands.get(f"iw:{iface}", ctx.snap.commands.get(f"iwconfig:{iface}", ""))
            ev.append(Evidence(f"iw dev {iface} get power_save", f"failed: {failed.strip()[:120]}"))
        else:
            unknown.append(iface)
    out = []
    if on:
        out.append(ctx.finding("wifi-power-save", ev, ifaces=", ".join(on), first=on[0]))
    if unknown:
        out.append(ctx.finding("wifi-power-save-unknown",
                               [Evidence(f"/sys/class/net/{i}/phy80211", "present") for i in unknown],
                               ifaces=", ".join(unknown)))
    return out


CHECKS = [login_limits, swap, wifi_power_save]
