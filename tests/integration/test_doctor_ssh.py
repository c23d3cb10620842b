"""doctor and tune over SSH: the loopback sshd is the board (tests/support/sshd.py).
As root it sees this machine as a local doctor does; as a login that is not
root, the limits of that login are checked (on a Pi 4 fixture tree, whose
/proc/self/limits has none); tune works through sudo -n and is refused
without it."""

from __future__ import annotations

import json

import pytest

from rtforge.cli import main
from rtforge.device import LocalTransport
from rtforge.device.doctor.diagnose import diagnose
from rtforge.device.transport.device import Device

from ..support.simboard import copy_tree, remove_tree, tree_digest

pytestmark = pytest.mark.root

THREADS = {"busy-thread", "busy-irq-thread", "dwc-otg-irq-busy"}   # depend on the moment


@pytest.fixture
def trees():
    made = []

    def make(name):
        made.append(copy_tree(name))
        return made[-1]
    yield make
    for root in made:
        remove_tree(root)


def ssh_doctor(capsys, sshd, host, *args) -> dict:
    assert main(["doctor", host, "--ssh-config", str(sshd.ssh_config), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_doctor_over_ssh_sees_what_a_local_doctor_sees(sshd, capsys):
    remote = ssh_doctor(capsys, sshd, "board", "--window-s", "0.5")
    local = diagnose(Device(LocalTransport()), window_s=0)
    assert remote["target"] == "board"
    assert (remote["kernel_release"], remote["preempt"], remote["model"]) == (
        local.kernel_release, local.preempt, local.model)
    ids = {f["id"] for f in remote["findings"]} - THREADS
    assert ids == set(local.ids()) - THREADS
    # a remote fix that names rtforge names the board
    irq = [f for f in remote["findings"] if f["id"] == "irq-on-isolated"]
    assert all("rtforge tune board --isolate" in f["fix"] for f in irq)


def test_the_limits_of_a_login_that_is_not_root(sshd, capsys, trees):
    pi4 = trees("pi4")
    doc = ssh_doctor(capsys, sshd, "board-nosudo", "--sysroot", str(pi4), "--window-s", "0")
    by_id = {f["id"]: f for f in doc["findings"]}
    rt = by_id["rtprio-limit"]
    login = sshd.users["nosudo"]
    assert rt["title"] == f"the login {login} may not use real-time priorities (rtprio limit 0)"
    assert rt["evidence"][0] == {"source": "/proc/self/limits", "value": "Max realtime priority 0 0"}
    assert rt["fix"].startswith(f"echo '{login} - rtprio 98' | sudo tee -a /etc/security/limits.d/")
    assert by_id["memlock-limit"]["title"] == f"the login {login} may lock only 8192 KiB of memory"
    # a tree whose login has the limits, and root, who needs none
    pi5 = trees("pi5")
    doc = ssh_doctor(capsys, sshd, "board-nosudo", "--sysroot", str(pi5), "--window-s", "0")
    assert not {"rtprio-limit", "memlock-limit"} & {f["id"] for f in doc["findings"]}
    doc = ssh_doctor(capsys, sshd, "board", "--sysroot", str(pi4), "--window-s", "0")
    assert not {"rtprio-limit", "memlock-limit"} & {f["id"] for f in doc["findings"]}


def test_without_root_the_dma_latency_holder_is_unknown(sshd, capsys, trees):
    doc = ssh_doctor(capsys, sshd, "board-nosudo", "--sysroot", str(trees("x86")), "--window-s", "0")
    deep = next(f for f in doc["findings"] if f["id"] == "deep-idle")
    assert "unknown (reading it needs root)" in deep["title"]
    assert deep["evidence"][-1] == {"source": "/dev/cpu_dma_latency", "value": "unknown (needs root)"}
    # with passwordless sudo, doctor reads it through sudo -n
    doc = ssh_doctor(capsys, sshd, "board-sudo", "--sysroot", str(trees("x86")), "--window-s", "0")
    deep = next(f for f in doc["findings"] if f["id"] == "deep-idle")
    assert deep["evidence"][-1] == {"source": "/dev/cpu_dma_latency", "value": "2,000,000,000 µs, not open"}


def test_tune_over_ssh_through_sudo_and_back(sshd, capsys, trees):
    pi4 = trees("pi4")
    before = tree_digest(pi4)
    cfg = str(sshd.ssh_config)
    assert main(["tune", "board-sudo", "--ssh-config", cfg, "--sysroot", str(pi4)]) == 0
    out = capsys.readouterr().out
    assert "applied 2 of 2" in out and "board-sudo:" in out and "rtforge tune board-sudo --revert" in out
    assert (pi4 / "proc/sys/kernel/sched_rt_runtime_us").read_text() == "-1\n"
    doc = ssh_doctor(capsys, sshd, "board-sudo", "--sysroot", str(pi4), "--window-s", "0")
    assert {x["id"] for x in doc["fixed"]} == {"governor", "rt-throttling"}
    assert main(["tune", "board-sudo", "--ssh-config", cfg, "--sysroot", str(pi4), "--revert"]) == 0
    assert tree_digest(pi4) == before


def test_tune_without_sudo_is_refused_before_anything_changes(sshd, capsys, trees):
    pi4 = trees("pi4")
    before = tree_digest(pi4)
    assert main(["tune", "board-nosudo", "--ssh-config", str(sshd.ssh_config), "--sysroot", str(pi4)]) == 2
    err = capsys.readouterr().err.strip()
    assert "sudo on board-nosudo needs a password" in err and len(err.splitlines()) == 1
    assert tree_digest(pi4) == before
