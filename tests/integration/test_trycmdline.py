"""A kernel command line change through the same try-once template as a
kernel (device/deploy/trycmdline.py): the template does not assume a kernel bundle.  A
command line the kernel panics with falls back by itself.  The board is the
simulated Pi 4 of the deploy tests (tests/support/simpi.py), whose firmware
passes the command line file it resolves to the kernel's /proc/cmdline."""

from __future__ import annotations

import pytest

from rtforge.device import SshTransport
from rtforge.device.deploy.bundle import open_bundle
from rtforge.device.deploy.pibundle import deploy_pi, prefix_for
from rtforge.device.deploy.pitry import BLOCK_BEGIN
from rtforge.device.deploy.trycmdline import FILE, FILES, edit_cmdline, tune_cmdline
from rtforge.errors import UserError

from ..support.simpi import CMDLINE, OLD, SimKernel, SimulatedPi, make_bundle, make_pi4_tree

pytestmark = pytest.mark.root
RT = "6.12.0-rt5-rtforge"


@pytest.fixture
def pi(sshd, pi_root):
    kernels = make_pi4_tree(pi_root)
    OLD_PANICS = SimKernel(OLD.release, OLD.version, panics_with=("isolcpus=9",))
    kernels = {sha: OLD_PANICS for sha in kernels}  # the stock kernel, with a command line it panics on
    return SimulatedPi(SshTransport("board", ssh_config=sshd.ssh_config), pi_root, kernels), pi_root


def cmdline_now(root) -> str:
    return (root / "proc/cmdline").read_text().strip()


def test_edit_cmdline():
    assert edit_cmdline("a=1 isolcpus=2 quiet", ["isolcpus=3", "nohz_full=3"], ["quiet"]) == \
        "a=1 isolcpus=3 nohz_full=3"


@pytest.mark.slow
def test_a_good_command_line_is_tried_and_committed(pi):
    board, root = pi
    original = (root / "boot/firmware/config.txt").read_bytes()
    result = tune_cmdline(board, ["isolcpus=3", "nohz_full=3"])
    assert result.ok and result.state == "committed", result.message
    assert cmdline_now(root) == CMDLINE + " isolcpus=3 nohz_full=3" and board.boot_state[1] is True
    assert (root / "boot/firmware" / FILE).read_text() == CMDLINE + " isolcpus=3 nohz_full=3\n"
    assert (root / "boot/firmware/cmdline.txt").read_text() == CMDLINE + "\n"  # the original stays as it was
    config = (root / "boot/firmware/config.txt").read_text()
    assert config.startswith(original.decode()) and f"{BLOCK_BEGIN} cmdline:" in config and f"cmdline={FILE}" in config
    board.power_cycle()
    assert "isolcpus=3" in cmdline_now(root).split()


@pytest.mark.slow
def test_a_command_line_the_kernel_panics_with_falls_back(pi):
    board, root = pi
    original = (root / "boot/firmware/config.txt").read_bytes()
    result = tune_cmdline(board, ["isolcpus=9"])
    assert not result.ok and result.state == "fell-back"
    assert result.message == (f"board came back on its previous setup ({OLD.release}): the new kernel command line "
                              "did not boot, so the firmware fell back; config.txt is untouched and "
                              f"{FILE} was removed")
    assert (root / "boot/firmware/config.txt").read_bytes() == original and cmdline_now(root) == CMDLINE
    assert not (root / "boot/firmware" / FILE).exists() and not (root / "boot/firmware/tryboot.txt").exists()


@pytest.mark.slow
def test_a_kernel_block_and_a_command_line_block_live_side_by_side(pi, tmp_path):
    board, root = pi
    bundle_dir, sha = make_bundle(tmp_path / "bundle", RT)
    board.kernels[sha] = SimKernel(RT, "#1 SMP PREEMPT_RT", realtime=True)
    assert deploy_pi(board, open_bundle(bundle_dir)).ok
    result = tune_cmdline(board, ["isolcpus=3"])
    assert result.ok, result.message
    # the new file sits under the kernel's os_prefix, where the firmware reads cmdline files from
    assert (root / "boot/firmware" / prefix_for(RT) / FILE).exists()
    config = (root / "boot/firmware/config.txt").read_text()
    assert config.count(BLOCK_BEGIN) == 2 and f"os_prefix={prefix_for(RT)}" in config
    board.power_cycle()
    assert board.running == RT and "isolcpus=3" in cmdline_now(root).split()
    # a second tune replaces its own block, not the kernel's
    assert tune_cmdline(board, ["isolcpus=2"]).ok
    config = (root / "boot/firmware/config.txt").read_text()
    assert config.count(BLOCK_BEGIN) == 2 and f"cmdline={FILES[1]}" in config and f"cmdline={FILE}" not in config
    # the file in use was never rewritten; the new one replaced it at the commit
    assert (root / "boot/firmware" / prefix_for(RT) / FILES[1]).read_text().split().count("isolcpus=2") == 1
    assert not (root / "boot/firmware" / prefix_for(RT) / FILE).exists()
    board.power_cycle()
    assert "isolcpus=2" in cmdline_now(root).split() and "isolcpus=3" not in cmdline_now(root)


def test_bad_parameters_are_refused():
    with pytest.raises(UserError, match="is not one kernel parameter"):
        tune_cmdline(None, ["isolcpus=3 quiet"])
    with pytest.raises(UserError, match="nothing to change"):
        tune_cmdline(None, [])
