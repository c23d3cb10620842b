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
    out = ("\n\0@@machine\naarch64\n\0@@release\n6.12.0-rt5\n\0@@version\n#1 SMP PREEMPT_RT\n\0@@uid\n0\n"
           "\0@@tryboot\n0 0 0 1\n"
           "\0@@df_root\nFilesystem 1024-blocks Used Available Capacity Mounted on\n/dev/root 100 50 42 55% /\n"
           "\0@@ssh\n10.0.0.2 50000 10.0.0.7 22\n\0@@tools\nsh\ntar\n")
    f = from_blocks(blocks(out))
    assert (f.machine, f.is_root, f.tryboot_now, f.root_free_kb, f.ssh_address, f.tools) == \
        ("aarch64", True, True, 42, "10.0.0.7", {"sh", "tar"})
    assert f.preempt_model == "rt"
    assert "tools" not in f.to_dict() and "is_root" in f.to_dict()


def test_a_snapshot_reads_the_same_facts():
    snap = parse_output("\n\0@@f /proc/cmdline\nquiet\n\0@@uid\n1000\n\0@@user\npi\n\0@@machine\narmv7l\n", "")
    assert (snap.is_root, snap.user, snap.machine) == (False, "pi", "armv7l")
    assert snap.value("/proc/cmdline") == "quiet"
    bare = parse_output("\n\0@@f /proc/cmdline\nquiet\n", "")
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


# -- the named sections: the kernel section (kernel/running.py) and the trace section (measure/trace.py)

def test_the_kernel_section_reads_a_boards_files_below_its_root(tmp_path):
    """A copy of a Raspberry Pi OS board: its files say what it runs (not this
    machine's uname), its dpkg database which package installed the kernel."""
    from rtforge.device.transport.facts import KERNEL_NAMES, kernel_from_blocks, run_sections

    from ...support.runningboards import rpios

    root = rpios("6.12.25+rpt-rpi-v8", "aarch64", "Raspberry Pi 4 Model B Rev 1.4", "arm64",
                 config="CONFIG_ARM64=y\n", changelog_lines=["Built from stable_20250428"]).write(tmp_path / "b")
    out = run_sections(LocalTransport(), ("kernel",), str(root)).stdout
    assert set(blocks(out)) <= set(KERNEL_NAMES) and "@@machine" not in out   # only the section asked for
    k = kernel_from_blocks(blocks(out))
    assert (k.release, k.arch, k.machine, k.model) == ("6.12.25+rpt-rpi-v8", "aarch64", "",
                                                        "Raspberry Pi 4 Model B Rev 1.4")
    assert k.version.startswith("#1 SMP PREEMPT Debian") and k.os == "Debian GNU/Linux 12 (bookworm)"
    assert k.config_gz == "CONFIG_ARM64=y" and k.boot_config == ""
    assert k.dpkg is not None and k.dpkg[:2] == ["linux-image-6.12.25+rpt-rpi-v8", "1:6.12.25-1+rpt1"]
    assert k.dpkg_path == "/boot/vmlinuz-6.12.25+rpt-rpi-v8" and "stable_20250428" in k.changelog


def test_the_kernel_section_stays_in_its_tree(tmp_path):
    """A link out of the tree is not followed (rtforge_cat), and a release
    that is not a plain name is never put into a path (boot/config-...)."""
    from rtforge.device.transport.facts import kernel_from_blocks, run_sections

    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").symlink_to("/etc/os-release")          # this machine's
    (tmp_path / "proc/sys/kernel/osrelease").write_text("../../etc\n")
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot/config-../../etc").mkdir(parents=True)              # what a bad release would reach
    k = kernel_from_blocks(blocks(run_sections(LocalTransport(), ("kernel",), str(tmp_path)).stdout))
    assert (k.release, k.os, k.boot_config, k.dpkg) == ("../../etc", None, "", None)
    here = kernel_from_blocks(blocks(run_sections(LocalTransport(), ("kernel",)).stdout))
    assert (here.release, here.machine) == (platform.release(), platform.machine())


def test_sections_and_a_command_in_one_round_trip(tmp_path):
    """device, kernel and trace blocks and `then`, one script; the trace
    section reads this machine's tracing even after a section read below a tree."""
    from rtforge.device.transport.facts import kernel_from_blocks, read_trace, run_sections, trace_from_blocks

    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.6.1-tree\n")
    out = run_sections(LocalTransport(), ("device", "kernel", "trace"), str(tmp_path), ["sh"],
                       then=["sh", "-c", "echo said; exit 3"]).stdout
    v = blocks(out)
    assert from_blocks(v).tools == {"sh"} and kernel_from_blocks(v).release == "6.6.1-tree"
    assert trace_from_blocks(v) == read_trace(LocalTransport())
    assert trace_from_blocks(v).kernel == platform.release() == v["release"]      # one name, one meaning
    assert (v["then"], v["then_status"]) == ("said", "3")


def test_the_trace_section_parses_without_a_shell():
    from rtforge.device.transport.facts import trace_from_blocks

    t = trace_from_blocks(blocks("\n\0@@tracefs_known\n1\n\0@@tracefs\n\n\0@@tracers\n\n\0@@rtla\n1\n"
                                 "\0@@release\n6.1.0\n"))
    assert (t.tracefs, t.tracefs_known, t.tracers, t.rtla, t.rtla_aa, t.kernel) == (None, True, [], True, False,
                                                                                   "6.1.0")
    t = trace_from_blocks(blocks("\n\0@@tracefs\n/sys/kernel/tracing\n\0@@tracers\ntimerlat osnoise nop\n"
                                 "\0@@rtla_aa\n1\n"))
    assert (t.tracefs, t.tracers, t.rtla_aa, t.tracefs_known) == ("/sys/kernel/tracing", ["timerlat", "osnoise", "nop"],
                                                                  True, False)


def test_a_section_that_is_not_there_is_a_bug():
    import pytest

    from rtforge.device.transport.facts import run_sections

    with pytest.raises(ValueError, match="no facts section 'kernal'"):
        run_sections(LocalTransport(), ("kernal",))
