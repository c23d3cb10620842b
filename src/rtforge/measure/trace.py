"""`rtforge latency --trace`: record why the worst wake-ups were late, with
the kernel's timerlat tracer and rtla's auto-analysis beside the engine.

rtla timerlat stops at the first wake-up over its threshold (`--aa-only US`)
and prints where that wake-up's time went: the IRQ handler's delay, the IRQ
latency, the thread that was running and its stack, the IRQs, softirqs and
threads that interfered.  One analysis per stop, so the runner starts rtla
again after each (runner.sh `trace`) for as long as the engine measures,
up to MAX_ANALYSES; the texts land in raw/trace/N.out and
results/raw/rtla_analysis.py turns them into one line per spike.

Before anything starts, the target is asked whether it can trace at all
(the one facts reader's trace section, device/transport/facts.py): tracefs
mounted or mountable, `timerlat` among the kernel's tracers, and an rtla
with auto-analysis (timerlat_aa.c came after Debian 12's rtla 6.1, which
has only the stop, not the analysis; rtforge asks for --aa-only, which
skips rtla's own statistics to keep its cost on the target low, so the
check is for that option in rtla's help).
"""

from __future__ import annotations

import math
import shlex

from ..device.transport.facts import TraceFacts, read_trace
from ..errors import UserError

# Each analysis is a restart of rtla (a few hundred ms of tracer set-up, when
# nothing is analysed): a system late all the time gets this many, not one a
# second for hours.
MAX_ANALYSES = 50

# What the target offers, as the facts reader's trace section reads it.
TraceSupport = TraceFacts


def detect(transport, sudo: bool = False) -> TraceSupport:
    """What the target offers for --trace (as root, like the runner)."""
    return read_trace(transport, sudo=sudo)


FIX = ("build a kernel with `rtforge kernel build --fragments tracing`, or boot one with "
       "CONFIG_TIMERLAT_TRACER=y")


def require(support: TraceSupport, where: str, is_root: bool) -> None:
    """One sentence naming what is missing for --trace and how to get it."""
    kernel = f"the kernel {where} ({support.kernel})" if support.kernel else f"the kernel {where}"
    if support.tracefs is None:
        if not support.tracefs_known:
            raise UserError(f"--trace needs the kernel's tracing, and {kernel} has no tracefs: {FIX}")
        if not is_root:
            raise UserError(f"--trace needs root {where} (tracefs and the timerlat tracer are root's): "
                            "run as root, or measure a board as root")
        raise UserError(f"--trace needs tracefs, which could not be mounted {where}: "
                        "mount it with `mount -t tracefs nodev /sys/kernel/tracing` and try again")
    if "timerlat" not in support.tracers:
        shown = " ".join(support.tracers) or "none"
        raise UserError(f"--trace needs the timerlat tracer, which {kernel} lacks (its tracers: {shown}): {FIX}")
    # rtla itself is a tool like the engines' (target.TRACE_TOOLS, checked
    # after this); an rtla that is there must be one with auto-analysis.
    if support.rtla and not support.rtla_aa:
        raise UserError(f"--trace needs rtla's auto-analysis (`rtla timerlat top --aa-only`), which the rtla {where} "
                        "lacks (Debian 12 ships rtla 6.1): install a newer one "
                        "(on Debian 12: apt-get install -t bookworm-backports rtla, which is 6.12)")


def threshold_us(spike_threshold_ns: int) -> int:
    """rtla takes whole µs: rounded up, so rtla never stops below the run's threshold."""
    return max(1, math.ceil(spike_threshold_ns / 1000))


def rtla_argv(spike_threshold_ns: int, cpus: str, priority: int) -> list[str]:
    """rtla timerlat top, auto-analysis only (no statistics, no saved trace
    buffer), on the run's CPUs.

    Its measuring threads run one priority below the engine's, so they do
    not delay the engine's wake-ups (at rtla's default FIFO:95 they would
    run first); rtla then reports the engine's run time as interference."""
    return ["rtla", "timerlat", "top", "--aa-only", str(threshold_us(spike_threshold_ns)), "--dump-tasks",
            "-c", cpus, "-P", f"f:{max(1, priority - 1)}"]


def trace_cmd(argv: list[str]) -> str:
    """trace.cmd for the runner: the limit of analyses, then rtla's command
    (on one line: the runner reads one)."""
    if any("\n" in a for a in argv):
        raise ValueError("a trace command cannot hold a newline")
    return f"{MAX_ANALYSES}\n{shlex.join(argv)}\n"
