"""One way to learn a device's facts (device/transport/facts.py): the facts
script, the root rule every reader uses, and what a HOST argument names."""

from __future__ import annotations

import os
import platform

from rtforge.device import LocalTransport, SshTransport, board_host, open_transport
from rtforge.device.state.snapshot import parse_output, take_snapshot
from rtforge.device.transport.facts import blocks, from_blocks, read_facts, uid_is_root


def test_this_machine_is_named_one_way():
    for host in (None, "", "local", "localhost"):
        assert board_host(host) is None and isinstance(open_transport(host), LocalTransport)
    assert board_host("pi@raspberrypi.local") == "pi@raspberrypi.local"
    assert isinstance(open_transport("board"), SshTransport)


def test_root_is_uid_0_whoever_asks():
    assert uid_is_root("0\n") and uid_is_root(0) and not uid_is_root("1000") and not uid_is_root("")
    t = LocalTransport()
    f = read_facts(t, tools=["sh", "no-such-tool-here"])
    assert f.is_root == t.is_root() == (os.geteuid() == 0) == take_snapshot(t).is_root
    assert f.machine == platform.machine() and f.hostname == platform.node()
    assert f.tools == {"sh"} and f.ncpus == os.cpu_count() and f.online


def test_the_facts_blocks_parse_without_a_shell():
    out = ("\n@@machine\naarch64\n@@release\n6.12.0-rt5\n@@version\n#1 SMP PREEMPT_RT\n@@uid\n0\n@@tryboot\n0 0 0 1\n"
           "@@df_root\nFilesystem 1024-blocks Used Available Capacity Mounted on\n/dev/root 100 50 42 55% /\n"
           "@@ssh\n10.0.0.2 50000 10.0.0.7 22\n@@tools\nsh\ntar\n")
    f = from_blocks(blocks(out))
    assert (f.machine, f.is_root, f.tryboot_now, f.root_free_kb, f.ssh_address, f.tools) == \
        ("aarch64", True, True, 42, "10.0.0.7", {"sh", "tar"})
    assert f.preempt_model == "rt"
    assert "tools" not in f.to_dict() and "is_root" in f.to_dict()


def test_a_snapshot_reads_the_same_facts():
    snap = parse_output("\n@@f /proc/cmdline\nquiet\n@@uid\n1000\n@@user\npi\n@@machine\narmv7l\n", "")
    assert (snap.is_root, snap.user, snap.machine) == (False, "pi", "armv7l")
    assert snap.value("/proc/cmdline") == "quiet"
    bare = parse_output("\n@@f /proc/cmdline\nquiet\n", "")
    assert (bare.is_root, bare.user, bare.machine) == (False, "?", None)


def test_a_failed_command_names_its_cause_not_tars_last_words():
    from rtforge.device.transport.transport import failure_detail

    tar = ("tar: ./rtprobe: Cannot write: No space left on device\n"
           "tar: Exiting with failure status due to previous errors\n")
    said = failure_detail(tar, 2, "this machine")
    assert said.startswith("tar: ./rtprobe: Cannot write: No space left on device") and "disk is full" in said
    assert failure_detail("tar: x: Cannot open: Nope\ntar: Error exit delayed from previous errors\n", 2, "b") == \
        "tar: x: Cannot open: Nope"
    assert failure_detail("", 3, "b") == "exit status 3"


def test_what_a_target_sends_is_read_with_a_bound(tmp_path):
    """A fetched run streams to disk and stops at its bound: a board is not trusted to send only a run."""
    import pytest

    from rtforge.device import LocalTransport
    from rtforge.errors import UserError

    t = LocalTransport()
    dest = tmp_path / "out"
    assert t.run_to_file(["head", "-c", "3000", "/dev/zero"], dest, limit=4096) == 3000
    with pytest.raises(UserError, match="sent more than 1 MiB"):
        t.run_to_file(["cat", "/dev/zero"], dest, limit=1 << 20, step="fetching the run")   # endless
    assert dest.stat().st_size <= 1 << 20


def test_the_running_configuration_is_read_with_the_facts(tmp_path):
    """/proc/config.gz first (gzip's own), else /boot/config-<uname -r>; only
    the PREEMPT_RT lines come back, and a verify holds a kernel to them."""
    import gzip

    from rtforge.device.deploy.manifest import kernel_problems

    (tmp_path / "proc").mkdir()
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot" / f"config-{platform.release()}").write_text("CONFIG_X=y\nCONFIG_PREEMPT_RT=y\n")
    f = read_facts(LocalTransport(), root=str(tmp_path))
    assert (f.config_from, f.config_rt) == (f"/boot/config-{platform.release()}", ["CONFIG_PREEMPT_RT=y"])
    (tmp_path / "proc" / "config.gz").write_bytes(gzip.compress(b"CONFIG_A=m\n# CONFIG_PREEMPT_RT is not set\n"))
    f = read_facts(LocalTransport(), root=str(tmp_path))
    assert (f.config_from, f.config_rt) == ("/proc/config.gz", ["# CONFIG_PREEMPT_RT is not set"])
    rt_v = "#1 SMP PREEMPT_RT Tue"
    assert kernel_problems("PREEMPT_RT", rt_v, None, config_from=f.config_from, config_rt=f.config_rt) == [
        "its configuration (/proc/config.gz) has # CONFIG_PREEMPT_RT is not set"]
    assert kernel_problems("PREEMPT_RT", rt_v, None, config_from=None, config_rt=[]) == []  # none read: not guessed
    assert read_facts(LocalTransport(), root=str(tmp_path / "proc")).config_from is None
