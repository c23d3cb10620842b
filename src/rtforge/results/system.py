"""Facts about the measured system, derived from the probe's metadata."""

from __future__ import annotations

import re
from typing import Any


def preempt_model(uname_v: str | None, sched_preempt: str | None, realtime: int | None) -> str:
    """rt | full | voluntary | none | lazy | dynamic | unknown.

    ``uname -v`` names PREEMPT_RT on every RT kernel (mainline 6.12+ has no
    /sys/kernel/realtime, so that file is only a second witness).  On
    PREEMPT_DYNAMIC kernels the active mode is the parenthesised word in
    /sys/kernel/debug/sched/preempt, readable only with debugfs.
    """
    tokens = (uname_v or "").split()
    if "PREEMPT_RT" in tokens or realtime == 1:
        return "rt"
    if sched_preempt:
        m = re.search(r"\((\w+)\)", sched_preempt)
        if m:
            return m.group(1)
    if "PREEMPT_DYNAMIC" in tokens:
        return "dynamic"
    if "PREEMPT" in tokens:
        return "full"
    return "voluntary-or-none" if tokens else "unknown"


def describe(meta: dict[str, Any]) -> dict[str, Any]:
    """The probe's metadata plus the derived fields reports and the index use."""
    uname = meta.get("uname") or {}
    out = dict(meta)
    out["kernel_release"] = uname.get("release")
    out["kernel_version"] = uname.get("version")
    out["machine"] = uname.get("machine")
    out["hostname"] = uname.get("nodename")
    out["preempt_model"] = preempt_model(uname.get("version"), meta.get("sched_preempt"), meta.get("realtime"))
    govs = sorted({c.get("governor") for c in meta.get("cpufreq") or [] if c.get("governor")})
    out["governors"] = govs
    return out


def system_warnings(system: dict[str, Any]) -> list[str]:
    """Conditions known to spoil latency, each with what to change."""
    warn = []
    if system.get("preempt_model") not in ("rt", "unknown", None):
        warn.append(
            f"kernel is not PREEMPT_RT (preemption model: {system['preempt_model']}): "
            "build one with `rtforge kernel build` to get real-time latencies"
        )
    bad_govs = [g for g in system.get("governors", []) if g in ("ondemand", "powersave", "conservative", "schedutil")]
    if bad_govs:
        warn.append(
            f"CPU frequency governor {', '.join(bad_govs)} changes the clock under load: "
            "set 'performance' (e.g. cpupower frequency-set -g performance)"
        )
    if system.get("cpu_dma_latency_us") is None and system.get("uname"):
        warn.append("/dev/cpu_dma_latency could not be held, so deep C-states may add wake-up latency: run as root")
    return warn
