"""Which preemption model a kernel runs, from what it tells about itself."""

from __future__ import annotations

import re

# What preempt_model() names a kernel's model (besides "unknown"): the words a user may state on import too.
PREEMPT_MODELS = ("rt", "full", "voluntary", "none", "dynamic", "lazy")


def preempt_model(uname_v: str | None, sched_preempt: str | None, realtime: int | None) -> str:
    """rt | full | voluntary | none | lazy | dynamic | unknown.

    ``uname -v`` names PREEMPT_RT on every RT kernel (mainline 6.12+ has no
    /sys/kernel/realtime, so that file is only a second witness).  On
    PREEMPT_DYNAMIC kernels the active mode is the parenthesised word in
    /sys/kernel/debug/sched/preempt, readable only with debugfs.
    """
    tokens = (uname_v or "").split()
    # RT patches before 5.x wrote two words: "#1 SMP PREEMPT RT Fri ..."
    two_words = any(a == "PREEMPT" and b == "RT" for a, b in zip(tokens, tokens[1:]))
    if "PREEMPT_RT" in tokens or two_words or realtime == 1:
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
