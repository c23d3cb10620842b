"""The preemption model from what a kernel says about itself (uname -v as
real kernels print it)."""

import pytest

from rtforge.preempt import preempt_model


@pytest.mark.parametrize("uname_v, sched, realtime, model", [
    ("#1 SMP PREEMPT_RT Thu Nov 20 10:00:00 UTC 2026", None, None, "rt"),          # mainline 6.12+
    ("#1 SMP PREEMPT RT Fri Sep 20 11:03:49 BST 2019", None, None, "rt"),          # 4.19-rt (two words)
    ("#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)", None, None, "dynamic"),
    ("#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)", "none voluntary (full)", None, "full"),
    ("#1 SMP PREEMPT Debian 4.19.0", None, None, "full"),
    ("#1 SMP Debian 5.10.0", None, None, "voluntary-or-none"),
    ("#1 SMP Debian 5.10.0", None, 1, "rt"),                                       # /sys/kernel/realtime says so
    ("#1 SMP PREEMPT RTC-fix Debian", None, None, "full"),                          # not the two words
    (None, None, None, "unknown"),
])
def test_preempt_model(uname_v, sched, realtime, model):
    assert preempt_model(uname_v, sched, realtime) == model
