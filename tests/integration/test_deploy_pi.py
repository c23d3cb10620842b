"""Deploying to a Raspberry Pi: try once, verify, commit -- or fall back.

The board is a tree in a temp dir reached through the real loopback sshd;
only its firmware and reboots are simulated (tests/support/simpi.py, which
decides what boots with its own resolver, not rtforge's bootcfg).  Every failure
must leave config.txt byte-identical and the old kernel booting.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rtforge.device import ConnectionLost, SshTransport
from rtforge.device.deploy.bundle import open_bundle
from rtforge.device.deploy.pibundle import deploy_pi, prefix_for
from rtforge.device.deploy.pitry import BLOCK_BEGIN
from rtforge.device.firmware.bootcfg import DirFiles, resolve
from rtforge.device.transport.transport import UploadDamaged
from rtforge.errors import UserError

from ..support.flakylink import FlakyLink
from ..support.simpi import OLD, SimKernel, SimulatedPi, make_bundle, make_pi4_tree

pytestmark = pytest.mark.root
RT = "6.12.0-rt5-rtforge"
RT_VERSION = "#1 SMP PREEMPT_RT Fri Nov 20 12:00:00 UTC 2026"


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file the firmware or the OS would read (boot, modules, staging)."""
    out = {}
    for top in ("boot", "lib", "var"):
        for p in sorted((root / top).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def pi(sshd, tmp_path, pi_root):
    def make(behaviour="boots", realtime=False, version=RT_VERSION, user="board", damage: bytes | None = None,
             kernel_config: str | None = None):
        root = pi_root
        kernels = make_pi4_tree(root)
        bundle_dir, sha = make_bundle(tmp_path / "bundle", RT)
        kernels[sha] = SimKernel(RT, version, behaviour, realtime, config=kernel_config)
        t = FlakyLink(user, ssh_config=sshd.ssh_config, needle=damage) if damage else \
            SshTransport(user, ssh_config=sshd.ssh_config)
        board = SimulatedPi(t, root, kernels)
        return board, open_bundle(bundle_dir), root
    return make


def config(root: Path) -> bytes:
    return (root / "boot/firmware/config.txt").read_bytes()


def test_success_commits_and_the_new_kernel_boots_by_default(pi):
    board, bundle, root = pi(realtime=True, user="board-sudo")  # a non-root user with sudo
    original = config(root)
    steps = []
    result = deploy_pi(board, bundle, on_step=steps.append)
    assert result.ok and result.state == "committed", result.message
    assert steps == ["upload", "install modules", "install kernel", "write tryboot.txt",
                     "reboot into the try"]
    assert board.running == RT and board.boot_state[1] is True  # verified on the try boot
    new = config(root).decode()
    assert new.startswith(original.decode()) and new.count(BLOCK_BEGIN) == 1
    assert f"os_prefix={prefix_for(RT)}" in new and "kernel=kernel8-rtforge.img" in new
    backups = sorted((root / "boot/firmware").glob("config.txt.rtforge-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == original
    assert not (root / "boot/firmware/tryboot.txt").exists()
    assert not (root / "var/lib/rtforge/staging").exists() or not any((root / "var/lib/rtforge/staging").iterdir())
    pdir = root / "boot/firmware" / prefix_for(RT)
    assert (pdir / "kernel8-rtforge.img").read_bytes() == (bundle.root / "boot/kernel8-rtforge.img").read_bytes()
    assert (pdir / "overlays/README").exists() and (pdir / "cmdline.txt").read_bytes() == \
        (root / "boot/firmware/cmdline.txt").read_bytes()
    assert (root / f"lib/modules/{RT}/kernel/drivers/rtforge-test.ko").exists()
    assert (root / f"lib/modules/{OLD.release}/modules.dep").exists()  # the old kernel's modules untouched
    # the firmware model agrees, and a normal reboot (power cycle) runs the RT kernel
    now = resolve(DirFiles(root / "boot/firmware"), "pi4")
    assert now.kernel == prefix_for(RT) + "kernel8-rtforge.img" and now.dtb.startswith(prefix_for(RT))
    assert result.now_boots.kernel == now.kernel and result.warnings == []
    board.power_cycle()
    assert board.running == RT


def test_damaged_bundle_is_refused_before_anything_changes(pi):
    board, bundle, root = pi()
    before = snapshot(root)
    (bundle.root / "boot/kernel8-rtforge.img").write_bytes(b"tampered")
    with pytest.raises(
        UserError, match=r"the bundle .* is damaged: boot/kernel8-rtforge.img does not match its sha256"
    ):
        deploy_pi(board, bundle)
    assert snapshot(root) == before


def test_wrong_board_is_refused_before_anything_changes(pi):
    board, bundle, root = pi()
    before = snapshot(root)
    (root / "proc/device-tree/model").write_bytes(b"Raspberry Pi 3 Model B Rev 1.2\0")
    with pytest.raises(UserError, match=r"is a 'Raspberry Pi 3 Model B Rev 1.2', but the bundle is for Raspberry Pi 4"):
        deploy_pi(board, bundle)
    assert snapshot(root) == before


def test_a_board_without_a_boot_partition_is_refused_before_anything_changes(pi):
    from rtforge.device.deploy import pikernels

    board, bundle, root = pi()
    (root / "boot/firmware/config.txt").unlink()
    before = snapshot(root)
    for step in (lambda: deploy_pi(board, bundle), lambda: pikernels.installed(board),
                 lambda: pikernels.rollback(board)):
        with pytest.raises(UserError, match="board has no config.txt in /boot/firmware or /boot"):
            step()
    assert snapshot(root) == before


@pytest.mark.slow
def test_checksum_mismatch_on_the_board_unwinds(pi):
    board, bundle, root = pi(damage=b"rt dtb")  # the dtb's bytes are damaged on the way
    before = snapshot(root)
    with pytest.raises(
        UploadDamaged,
        match=rf"the upload to board is damaged: \S+/var/lib/rtforge/staging/{RT}/"
        r"boot/bcm2711-rpi-4-b\.dtb differs from what was sent;",
    ):
        deploy_pi(board, bundle)
    assert board.t.damaged == 1
    assert snapshot(root) == before


@pytest.mark.slow
def test_connection_cut_during_upload_unwinds_once_it_is_back(pi, sshd):
    board, bundle, root = pi()
    before = snapshot(root)

    def cut(step):
        if step == "install kernel":  # modules are installed: there is something to undo
            master = board.t.master_pid()
            sshd.stop()
            os.kill(master, signal.SIGKILL)  # the network is gone, and the connection with it
            threading.Timer(2.0, sshd.start).start()

    with pytest.raises(ConnectionLost, match=r"lost the connection to board.*\(during install kernel\)"):
        deploy_pi(board, bundle, on_step=cut)
    time.sleep(0.5)
    assert snapshot(root) == before  # the cleanup waited for the board and undid the modules


@pytest.mark.slow
def test_board_not_returning_leaves_config_untouched(pi):
    board, bundle, root = pi(behaviour="hangs")
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/panic").write_text("0\n")  # no panic=N: a panicking kernel would hang
    original = config(root)
    result = deploy_pi(board, bundle, timeout_s=1)
    assert result.warnings == [
        "a kernel that panics will hang here instead of resetting, so falling back needs a "
        "power cycle: add panic=10 to the kernel command line (cmdline.txt) or enable a "
        "hardware watchdog"
    ]
    assert not result.ok and result.state == "not-back"
    assert (
        "did not come back within 1 s: config.txt is untouched, "
        "so after a power cycle it boots its previous kernel (kernel8.img)"
        in result.message
    )
    assert config(root) == original
    board.power_cycle()
    assert board.running == OLD.release


@pytest.mark.slow
def test_kernel_that_panics_falls_back_and_is_removed(pi):
    board, bundle, root = pi(behaviour="panics")
    before = snapshot(root)
    result = deploy_pi(board, bundle)
    assert not result.ok and result.state == "fell-back" and result.running == OLD.release
    assert "came back on its previous kernel 6.6.51+rpt-rpi-v8: the new kernel did not boot" in result.message
    assert snapshot(root) == before  # tryboot.txt, boot files, modules and staging all gone


@pytest.mark.slow
def test_kernel_that_is_not_rt_is_not_committed(pi):
    board, bundle, root = pi(version="#1 SMP PREEMPT Fri Nov 20 12:00:00 UTC 2026")
    original = config(root)
    result = deploy_pi(board, bundle)
    assert not result.ok and result.state == "not-verified" and result.running == RT
    assert "uname -v lacks PREEMPT_RT" in result.message
    assert "config.txt is untouched, so `sudo reboot` returns it to its previous kernel (kernel8.img)" in result.message
    assert config(root) == original and not (root / "boot/firmware/tryboot.txt").exists()
    assert (root / f"lib/modules/{RT}").exists()  # the running kernel's modules stay
    board.power_cycle()
    assert board.running == OLD.release


@pytest.mark.slow
def test_a_kernel_whose_configuration_says_it_is_not_rt_is_not_committed(pi):
    """uname -v and /sys/kernel/realtime can say RT while the running
    configuration does not (a reused .config, a marker put in by hand): the
    configuration is the third witness, and it is believed."""
    board, bundle, root = pi(realtime=True, kernel_config="CONFIG_SMP=y\n# CONFIG_PREEMPT_RT is not set\n")
    original = config(root)
    result = deploy_pi(board, bundle)
    assert not result.ok and result.state == "not-verified" and result.running == RT
    assert "its configuration (/proc/config.gz) has # CONFIG_PREEMPT_RT is not set" in result.message
    assert config(root) == original
    rt = next(k for k in board.kernels.values() if k.release == RT)
    rt.config = "CONFIG_SMP=y\nCONFIG_PREEMPT_RT=y\n"  # the same kernel, built with full RT
    board.power_cycle()  # back on the old kernel, whose modules folder is not this one's
    result = deploy_pi(board, bundle)
    assert result.ok, result.message


@pytest.mark.slow
def test_firmware_without_tryboot_needs_no_try(pi):
    board, bundle, root = pi(realtime=True)
    (root / "proc/device-tree/chosen/bootloader/tryboot").unlink()
    original = config(root)
    with pytest.raises(UserError, match="has no tryboot .* or use --no-try"):
        deploy_pi(board, bundle)
    assert config(root) == original
    result = deploy_pi(board, bundle, try_first=False)
    assert result.ok and board.running == RT
    backup = next((root / "boot/firmware").glob("config.txt.rtforge-*"))
    assert backup.read_bytes() == original


@pytest.mark.slow
def test_redeploying_replaces_the_block(pi, tmp_path):
    board, bundle, root = pi(realtime=True)
    assert deploy_pi(board, bundle).ok
    second_dir, sha = make_bundle(tmp_path / "bundle2", "6.12.1-rt6-rtforge", tag="second rt kernel")
    board.kernels[sha] = SimKernel("6.12.1-rt6-rtforge", RT_VERSION, realtime=True)
    result = deploy_pi(board, open_bundle(second_dir))
    assert result.ok, result.message
    text = config(root).decode()
    assert text.count(BLOCK_BEGIN) == 1 and "rtforge-6.12.1-rt6-rtforge/" in text and prefix_for(RT) not in text
    assert board.running == "6.12.1-rt6-rtforge"


@pytest.mark.slow
def test_kernels_list_remove_and_rollback(pi, tmp_path):
    from rtforge.device.deploy import pikernels

    board, bundle, root = pi(realtime=True)
    original = config(root)
    with pytest.raises(UserError, match="no earlier boot configuration"):
        pikernels.rollback(board)
    assert deploy_pi(board, bundle).ok
    [k], now = pikernels.installed(board)
    assert (k.release, k.default, k.running) == (RT, True, True) and now.kernel.startswith(prefix_for(RT))
    with pytest.raises(UserError, match="is running on board: reboot into another kernel first"):
        pikernels.remove(board, RT)
    backup, now = pikernels.rollback(board)
    assert backup.startswith("config.txt.rtforge-") and now.kernel == "kernel8.img"
    assert config(root) == original
    board.power_cycle()
    assert board.running == OLD.release
    [k], _ = pikernels.installed(board)
    assert (k.default, k.running) == (False, False)
    pikernels.remove(board, RT)
    assert not (root / "boot/firmware" / prefix_for(RT)).exists() and not (root / f"lib/modules/{RT}").exists()
    assert (root / "boot/firmware/kernel8.img").exists() and (root / f"lib/modules/{OLD.release}").exists()
    assert pikernels.installed(board)[0] == []
    with pytest.raises(UserError, match=f"no rtforge kernel {RT} on board"):
        pikernels.remove(board, RT)


@pytest.mark.slow
def test_headers_go_in_with_the_kernel_through_the_boards_apt(sshd, tmp_path, pi_root, capsys):
    """--headers: the bundle's linux-headers package is installed by the
    board's real apt and dpkg (the tree's own: tests/support/aptrepo.py), in
    the same try: a kernel that does not come back takes its headers with it."""
    import subprocess

    from rtforge.cli import main

    from ..support.aptrepo import host_state, make_apt_tree

    pkg = tmp_path / "hdr"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / f"usr/src/linux-headers-{RT}").mkdir(parents=True)
    (pkg / f"usr/src/linux-headers-{RT}/Module.symvers").write_text("0x12345678\tprintk\tvmlinux\tEXPORT_SYMBOL\n")
    (pkg / "DEBIAN/control").write_text(f"Package: linux-headers-{RT}\nVersion: {RT}-1\nArchitecture: arm64\n"
                                        "Maintainer: rtforge tests <tests@rtforge.invalid>\n"
                                        "Description: stand-in for Kbuild's headers package\n")
    deb = tmp_path / f"linux-headers-{RT}_{RT}-1_arm64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(pkg), str(deb)], check=True, capture_output=True)
    before = host_state(RT)
    kernels = make_pi4_tree(pi_root)
    make_apt_tree(pi_root, "http://127.0.0.1:9/")  # nothing is fetched: the package is the bundle's
    bundle_dir, sha = make_bundle(tmp_path / "bundle", RT, headers=deb)
    kernels[sha] = SimKernel(RT, RT_VERSION, "panics", realtime=True)  # the firmware falls back
    board = SimulatedPi(SshTransport("board", ssh_config=sshd.ssh_config), pi_root, kernels)

    def status() -> str:
        return subprocess.run(["dpkg-query", f"--root={pi_root}", "-W", "-f", "${Status}", f"linux-headers-{RT}"],
                              capture_output=True, text=True).stdout

    steps: list[str] = []
    result = deploy_pi(board, open_bundle(bundle_dir), headers=True, on_step=steps.append)
    assert not result.ok and "install the headers" in steps
    assert status() in ("", "unknown ok not-installed", "deinstall ok config-files")  # undone with the kernel
    kernels[sha].behaviour = "boots"
    result = deploy_pi(board, open_bundle(bundle_dir), headers=True)
    assert result.ok, result.message
    assert status() == "install ok installed"
    assert (pi_root / f"usr/src/linux-headers-{RT}/Module.symvers").is_file()
    assert host_state(RT) == before  # this machine's dpkg knows nothing of it
    # rolled back and booted into the old kernel, the kernel is removed with its headers
    from rtforge.device.deploy import pikernels

    pikernels.rollback(board)
    board.power_cycle()
    pikernels.remove(board, RT)
    assert status() in ("", "unknown ok not-installed", "deinstall ok config-files")
    assert not (pi_root / f"usr/src/linux-headers-{RT}").exists()
    # a bundle without headers is refused before the board is reached, with the build's reason
    plain, _ = make_bundle(tmp_path / "plain", "6.12.9-rt1-rtforge")
    assert main(["deploy", "nowhere.invalid", str(plain), "--headers"]) == 2
    err = capsys.readouterr().err
    assert "has no headers package" in err and "deploy without --headers" in err
