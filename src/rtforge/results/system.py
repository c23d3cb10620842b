"""Facts about the measured system, derived from the probe's metadata."""

from __future__ import annotations

from typing import Any

from ..preempt import preempt_model


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
        warn.append("/dev/cpu_dma_latency could not be held (no permission, or the kernel lacks it), so deep "
                    "C-states may add wake-up latency: run as root on a kernel with CPU idle PM QoS")
    return warn
