"""rtforge doctor: what hurts latency on a target, each with its evidence and fix.

One snapshot of the target (device/state/snapshot.py: one round trip, a short
window for the threads' CPU use), then every check of checks_kernel,
checks_cpu and checks_system runs on it.  A finding that `rtforge tune` has
fixed during this boot is listed as fixed, with the settings that fixed
it; one that fires although tune had fixed it says so in its evidence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ...errors import UserError
from ..state.procparse import user_cpulist
from ..state.snapshot import take_snapshot
from ..transport.device import Device
from . import checks_cpu, checks_kernel, checks_system
from .findings import SEVERITIES, Context, Evidence, Finding, catalog, cpus_text

CHECKS = [*checks_kernel.CHECKS, *checks_cpu.CHECKS, *checks_system.CHECKS]
DEFAULT_WINDOW_S = 2.0
MAX_WINDOW_S = 60.0


@dataclass
class Fixed:
    id: str
    operation: str
    settings: list[str]          # "target: before -> applied"


@dataclass
class DoctorReport:
    target: str
    kernel_release: str
    kernel_version: str
    preempt: str
    model: str | None
    isolated: list[int]
    window_s: float
    findings: list[Finding]
    fixed: list[Fixed] = field(default_factory=list)
    threads: list[checks_cpu.ThreadUse] = field(default_factory=list)

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def ids(self) -> list[str]:
        return [f.id for f in self.findings]

    def to_dict(self) -> dict:
        return {
            "target": self.target, "kernel_release": self.kernel_release, "kernel_version": self.kernel_version,
            "preempt": self.preempt, "model": self.model, "isolated": self.isolated, "window_s": self.window_s,
            "counts": {s: self.count(s) for s in SEVERITIES},
            "findings": [f.to_dict() for f in self.findings],
            "fixed": [asdict(x) for x in self.fixed],
            "threads": [t.to_dict() for t in self.threads],
        }


def check_window(window_s: float) -> float:
    if not 0 <= window_s <= MAX_WINDOW_S:
        raise UserError(f"--window-s {window_s:g} is out of range: give 0 (no thread sampling) to {MAX_WINDOW_S:g} s")
    return window_s


def diagnose(board: Device, *, window_s: float = DEFAULT_WINDOW_S, isolate: str | None = None,
             host_arg: str = "") -> DoctorReport:
    """Read the target once and run every check on what was read."""
    check_window(window_s)
    snap = take_snapshot(board.t, board.root, window_s)
    ctx = Context(snap, host_arg=host_arg, window_s=window_s)
    if isolate is not None:
        ctx.extra_isolated = user_cpulist(isolate, ctx.online)
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(ctx))
    findings.extend(checks_kernel.cpu_lists_unread(ctx))
    findings.sort(key=lambda f: SEVERITIES.index(f.severity))
    window, threads = checks_cpu.measure_threads(snap)
    return DoctorReport(
        target=board.name, kernel_release=ctx.release, kernel_version=ctx.version, preempt=ctx.preempt,
        model=ctx.model, isolated=sorted(ctx.isolated), window_s=round(window, 3), findings=findings,
        fixed=_fixed_by_tune(ctx, findings), threads=threads[:10],
    )


def _fixed_by_tune(ctx: Context, findings: list[Finding]) -> list[Fixed]:
    """Findings whose tune operation is applied (this boot) and that no longer fire."""
    state = ctx.tune_state
    if not state:
        return []
    firing = {f.id: f for f in findings}
    fixed = []
    for fid, spec in catalog()["finding"].items():
        op = spec.get("tune")
        if not op or op not in state.ops():
            continue
        settings = [f"{s.label or s.target}: {s.before} -> {s.applied}" for s in state.settings if s.op == op]
        if fid in firing:
            firing[fid].evidence.append(Evidence(
                "/var/lib/rtforge/tune-state.json",
                f"rtforge tune applied {op} at {state.updated} (isolate {cpus_text(state.isolate) or '-'}), "
                "but this still fires: changed since, or not all could be changed"))
        else:
            fixed.append(Fixed(fid, op, settings))
    return fixed
