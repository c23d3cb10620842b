"""cyclictest's --spike lines and its -b (break trace) stop, as the text
reader scans them (``text.Scan``): spikes per thread, the largest ones, and
what a break means for the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .common import NS, Source, top_spikes

if TYPE_CHECKING:
    from .text import Scan


def spike_results(src: Source, s: Scan, threads: list[int],
                  unit: int) -> tuple[dict[int, int | None], list[list[int]], list[str]]:
    """Spike count per thread (None: unknown), the largest spikes, warnings."""
    if not s.spikes:
        return {t: None for t in threads}, [], []
    for no, thread, _, _ in s.spikes:
        if thread not in threads:
            raise src.error(no, f"found a spike of thread {thread}, but the output has no such thread")
    if s.spikes_total is None:
        raise src.error(s.spikes[-1][0] + 1, "expected the 'spikes = N' line after the spike lines; "
                                             "the file is cut off or damaged")
    no, total = s.spikes_total
    listed = len(s.spikes)
    if listed > total:
        raise src.error(no, f"'spikes = {total}' but {listed} spike lines precede it; the file is damaged")
    counts: dict[int, int | None] = {t: sum(1 for sp in s.spikes if sp[1] == t) for t in threads}
    warnings = []
    if listed < total:
        counts = {t: None for t in threads}
        warnings.append(f"cyclictest counted {total:,} spikes but listed only {listed:,} (its --spike-nodes "
                        "limit), so spikes per CPU are unknown: next time, give cyclictest a larger --spike-nodes "
                        "or a higher --spike")
    top = top_spikes([(t, ts * 1000, lat * unit) for _, t, lat, ts in s.spikes])
    return counts, top, warnings


def break_info(s: Scan) -> tuple[int | None, int] | None:
    """(thread index or None, value) of a -b stop."""
    if "value" not in s.breaks:
        return None
    value = s.breaks["value"][1]
    tid = s.breaks.get("thread", (0, None))[1]
    thread = s.tids.index(tid) if tid in s.tids else None
    return thread, value


def break_warning(thread: int | None, value: int, unit: int, note: str = "") -> str:
    who = f"thread {thread}" if thread is not None else "a thread"
    shown = f"{value:,} ns" if unit == NS else f"{value:,} µs"
    return (f"cyclictest stopped itself at its -b (break trace) threshold when {who} woke {shown} late{note}: the "
            "run covers only the time before that wake-up; next time, leave out -b for a measurement of the whole "
            "duration")
