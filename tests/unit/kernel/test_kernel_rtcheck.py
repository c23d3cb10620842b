"""The running kernel is RT, or it is not: uname -v, /sys/kernel/realtime
and the running configuration, read through a transport (issue 25 item 4).
Board copies here; this machine for real (its own uname and config are the
independent witnesses); the QEMU PC guest's Debian kernel in test_deploy_grub."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import pytest

from rtforge.device import LocalTransport
from rtforge.kernel.rtcheck import judge, running_rt

RT_V = "#1 SMP PREEMPT_RT Tue Nov 25 10:00:00 UTC 2026"


def board(root: Path, *, uname_v: str, realtime: str | None, config: str | None, where: str = "proc",
          release: str = "6.12.117-rt-rtforge") -> str:
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text(release + "\n")
    (root / "proc/sys/kernel/version").write_text(uname_v + "\n")
    if realtime is not None:
        (root / "sys/kernel").mkdir(parents=True)
        (root / "sys/kernel/realtime").write_text(realtime + "\n")
    if config is not None and where == "proc":
        (root / "proc/config.gz").write_bytes(gzip.compress(config.encode()))
    elif config is not None:
        (root / "boot").mkdir()
        (root / f"boot/config-{release}").write_text(config)
    return str(root)


def test_mainline_rt_with_its_config(tmp_path):
    s = running_rt(LocalTransport(), root=board(tmp_path, uname_v=RT_V, realtime=None,
                                                 config="CONFIG_EXPERT=y\nCONFIG_PREEMPT_RT=y\n"))
    assert s.is_rt and s.realtime is None and s.config_from == "/proc/config.gz"
    assert s.sentence() == ("6.12.117-rt-rtforge is an RT kernel: uname -v has PREEMPT_RT, no /sys/kernel/realtime "
                            "(mainline), /proc/config.gz has CONFIG_PREEMPT_RT=y")


def test_rt_patched_with_realtime_and_boot_config(tmp_path):
    s = running_rt(LocalTransport(), release="6.1.0-rt5", root=board(
        tmp_path, uname_v=RT_V, realtime="1", config="CONFIG_PREEMPT_RT=y\n", where="boot", release="6.1.0-rt5"))
    assert s.is_rt and s.realtime == "1" and s.config_from == "/boot/config-6.1.0-rt5"


@pytest.mark.parametrize("uname_v, realtime, config, problem", [
    ("#1 SMP PREEMPT Tue", None, "CONFIG_PREEMPT_RT=y\n", "uname -v lacks PREEMPT_RT (#1 SMP PREEMPT Tue)"),
    (RT_V, "0", "CONFIG_PREEMPT_RT=y\n", "/sys/kernel/realtime is 0"),
    # the trap: a kernel that says PREEMPT_RT built from a configuration that is not
    (RT_V, None, "# CONFIG_PREEMPT_RT is not set\n",
     "its configuration (/proc/config.gz) has # CONFIG_PREEMPT_RT is not set"),
    (RT_V, None, "CONFIG_HZ=1000\n", "its configuration (/proc/config.gz) has no PREEMPT_RT line"),
])
def test_any_witness_against_is_not_rt(tmp_path, uname_v, realtime, config, problem):
    s = running_rt(LocalTransport(), root=board(tmp_path, uname_v=uname_v, realtime=realtime, config=config))
    assert not s.is_rt and s.problems == [problem]
    assert s.sentence() == f"6.12.117-rt-rtforge is not the RT kernel expected: {problem}"


def test_no_config_is_said_not_guessed(tmp_path):
    s = running_rt(LocalTransport(), root=board(tmp_path, uname_v=RT_V, realtime=None, config=None))
    assert s.is_rt and s.config_from is None
    assert s.notes == ["no /proc/config.gz or /boot/config-<release> to check its configuration against"]


def test_the_wrong_release_and_old_two_word_marker():
    s = judge("#1 SMP PREEMPT RT Fri Jan 1", None, "CONFIG_PREEMPT_RT_FULL=y", "/boot/config-4.19.1-rt3", "RT",
              "4.19.1-rt3", "4.19.1-rt3")
    assert s.is_rt, s.problems
    s = judge(RT_V, None, None, None, "PREEMPT_RT", "6.1.0", "6.12.117-rt-rtforge")
    assert s.problems == ["it runs 6.1.0, not 6.12.117-rt-rtforge"]


def test_this_machine():
    """Compared with Python's own uname and the config file read here."""
    s = running_rt(LocalTransport())
    assert s.release == os.uname().release and s.uname_v == os.uname().version
    rt_by_uname = "PREEMPT_RT" in os.uname().version.split()
    if Path("/proc/config.gz").exists():
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode(errors="replace")
        on = re.search(r"^CONFIG_PREEMPT_RT=y$", text, re.M) is not None
        assert s.config_from == "/proc/config.gz" and (s.config_rt == "CONFIG_PREEMPT_RT=y") == on
        assert s.is_rt == (rt_by_uname and on and (s.realtime in (None, "1")))
    else:
        assert s.is_rt == (rt_by_uname and s.realtime in (None, "1"))
