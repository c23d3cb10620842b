"""Hostile neighbours, round two: what a local user names.  A thread's name
(up to 15 bytes of anything but NUL, newlines included) and the names of
the files a process holds open are the board's text a user controls, and
doctor's snapshot reads both (the threads' stat, who holds
/dev/cpu_dma_latency).  Each test runs the neighbour's process for real on
this machine, as the sshd fixture's second login (no sudo), and takes the
snapshot as rtforge does, as root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rtforge.device import LocalTransport
from rtforge.device.doctor.checks_cpu import dma_latency_holders
from rtforge.device.state.snapshot import take_snapshot

pytestmark = pytest.mark.root

# A name that, in the wire format before the NUL mark, was a block of its
# own: the facts' "uid", saying rtforge is not root here.
FORGED = "x\n@@uid\n1234"

_NAMED_BUSY = """
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)   # PR_SET_NAME
print("named", flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    pass
"""

_HOLDS = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
print("open", flush=True)
time.sleep(60)
"""


def as_neighbour(user: str, script: str, *args: str) -> subprocess.Popen:
    """The neighbour's python (the system's: the project's venv is not theirs
    to run), started and past its first line of output."""
    p = subprocess.Popen(["runuser", "-u", user, "--", "/usr/bin/python3", "-c", script, *args],
                         stdout=subprocess.PIPE, text=True, cwd="/")
    assert p.stdout is not None and p.stdout.readline(), "the neighbour's process did not start"
    return p


def child_of(p: subprocess.Popen) -> int:
    """runuser's child: the neighbour's python itself."""
    kids = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
    return int(kids[0]) if kids else p.pid


def test_a_thread_name_forges_no_fact_and_the_thread_is_seen(sshd):
    busy = as_neighbour(sshd.users["nosudo"], _NAMED_BUSY, FORGED)
    try:
        pid = child_of(busy)
        snap = take_snapshot(LocalTransport(), window_s=0.5)
    finally:
        busy.kill()
        busy.wait()
    assert snap.is_root, "the neighbour's thread name changed what rtforge is on the board"
    first, last = snap.samples[0].threads, snap.samples[-1].threads
    mine = [t for (tid, _), t in last.items() if tid == pid]
    assert mine and mine[0].comm == FORGED, sorted(t.comm for t in last.values() if "x" in t.comm)
    # seen in both samples, and busy between them: doctor can account for its CPU time
    before = next(t for (tid, _), t in first.items() if tid == pid)
    assert mine[0].ticks > before.ticks


def test_a_file_named_like_the_device_is_not_a_dma_latency_holder(sshd):
    shared = Path(tempfile.mkdtemp(prefix="rtforge-neighbour-"))    # /tmp is everyone's
    planted = shared / "dev" / "cpu_dma_latency"
    planted.parent.mkdir()
    planted.write_bytes(b"\0\0\0\0")
    for d in (shared, planted.parent):
        d.chmod(0o755)
    planted.chmod(0o644)
    fake = as_neighbour(sshd.users["nosudo"], _HOLDS, str(planted))
    real = subprocess.Popen([sys.executable, "-c", _HOLDS, "/dev/cpu_dma_latency"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert real.stdout is not None and real.stdout.readline()
        faker = child_of(fake)
        # the kernel's own word for what each holds, beside rtforge's
        held = {os.readlink(f"/proc/{faker}/fd/{n}") for n in os.listdir(f"/proc/{faker}/fd")}
        assert str(planted) in held, held
        holders = dma_latency_holders(take_snapshot(LocalTransport()))
    finally:
        for p in (fake, real):
            p.kill()
            p.wait()
        shutil.rmtree(shared, ignore_errors=True)
    assert real.pid in holders and faker not in holders, (holders, real.pid, faker)
