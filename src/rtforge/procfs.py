"""/proc/<pid>/stat, read safely (the command name may hold spaces and ')')."""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int) -> list[str]:
    """Fields after the command name: [0] state, [2] pgrp, [19] start time; [] if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat[stat.rindex(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """Start time in clock ticks since boot: with the pid, names a process even after pid reuse."""
    f = stat_fields(pid)
    return int(f[19]) if f else None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group pgid."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            f = stat_fields(int(name))
            if f and int(f[2]) == pgid and f[0] != "Z":
                out.append(int(name))
    return out
