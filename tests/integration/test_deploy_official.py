"""`rtforge deploy HOST --official`: Raspberry Pi's own RT kernel package,
installed by the real apt and dpkg on the board, then the same try-once path
as a built kernel.

The board is a simulated Pi 4 (tests/support/simpi.py: a tree reached over
the loopback sshd; only firmware and reboots simulated) with its own dpkg
database and apt configuration, and Raspberry Pi's repository is a local one
on loopback serving a stand-in package built here with dpkg-deb
(tests/support/aptrepo.py says why apt cannot touch this machine).
"""

from __future__ import annotations

import hashlib
import re
import subprocess

import pytest

from rtforge.cli import main
from rtforge.device import SshTransport
from rtforge.device.deploy import pikernels
from rtforge.device.deploy.official import IMAGE, PACKAGE, deploy_official
from rtforge.device.deploy.pitry import BLOCK_BEGIN
from rtforge.device.transport.device import Device
from rtforge.errors import UserError

from ..support.aptrepo import AptRepo, build_kernel_deb, host_state, make_apt_tree
from ..support.simpi import OLD, SimKernel, SimulatedPi, make_pi4_tree

pytestmark = pytest.mark.root
REL = "6.12.25+rpt-rpi-v8-rt"
RT_VERSION = "#1 SMP PREEMPT_RT Debian 1:6.12.25-1+rpt1 (2025-04-30)"


@pytest.fixture
def official(sshd, tmp_path, pi_root):
    """make(behaviour, rt) -> (SimulatedPi with its apt pointed at a loopback
    repository holding linux-image-rpi-v8-rt, its tree)."""
    repos, before = [], host_state(REL)

    def make(behaviour="boots", rt=True):
        deb, image = build_kernel_deb(tmp_path, REL, rt=rt)
        repo = AptRepo(tmp_path / "repo", [deb])
        repos.append(repo)
        kernels = make_pi4_tree(pi_root)
        make_apt_tree(pi_root, repo.url)
        kernels[hashlib.sha256(image).hexdigest()] = SimKernel(REL, RT_VERSION, behaviour, realtime=True)
        return SimulatedPi(SshTransport("board", ssh_config=sshd.ssh_config), pi_root, kernels), pi_root
    yield make
    for repo in repos:
        repo.close()
    assert host_state(REL) == before  # this machine's /boot, /lib/modules and dpkg are untouched


def tree_dpkg(root, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["dpkg-query", f"--root={root}", *args], capture_output=True, text=True)


@pytest.mark.slow
def test_official_kernel_is_installed_by_apt_tried_verified_and_committed(official):
    board, root = official()
    original = (root / "boot/firmware/config.txt").read_bytes()
    steps = []
    result = deploy_official(board, on_step=steps.append)
    assert result.ok and result.state == "committed", result.message
    assert steps == ["update the package lists", f"install {PACKAGE}", "write tryboot.txt", "reboot into the try"]
    assert result.message.startswith(f"board runs {REL} (PREEMPT_RT) and now boots it by default: kernel {IMAGE}")
    assert board.running == REL and board.boot_state[1] is True  # verified on the try boot
    # dpkg of the board's tree knows the package, and its files are where the real one puts them
    assert tree_dpkg(root, "-W", "-f", "${Status}", PACKAGE).stdout == "install ok installed"
    assert (root / "boot/firmware" / IMAGE).exists() and (root / f"lib/modules/{REL}/modules.dep").exists()
    config = (root / "boot/firmware/config.txt").read_text()
    assert config.startswith(original.decode()) and config.count(BLOCK_BEGIN) == 1
    assert f"kernel={IMAGE}\narm_64bit=1\nauto_initramfs=0\n" in config
    assert not (root / "boot/firmware/tryboot.txt").exists()
    board.power_cycle()  # committed: a normal boot runs it
    assert board.running == REL
    # `rtforge kernels` lists it (the library call under the CLI)
    kernels, now = pikernels.installed(board)
    assert [(k.release, k.prefix, k.default, k.running) for k in kernels] == [(REL, "", True, True)]
    assert now.kernel == IMAGE and PACKAGE in kernels[0].board


@pytest.mark.slow
def test_official_kernel_that_panics_falls_back_and_is_purged(official):
    board, root = official(behaviour="panics")
    original = (root / "boot/firmware/config.txt").read_bytes()
    result = deploy_official(board)
    assert not result.ok and result.state == "fell-back" and result.running == OLD.release
    assert result.message == (f"board came back on its previous kernel {OLD.release}: the new kernel did not boot, "
                              f"so the firmware fell back; config.txt is untouched and {PACKAGE} was removed")
    assert (root / "boot/firmware/config.txt").read_bytes() == original
    assert not (root / "boot/firmware/tryboot.txt").exists() and not (root / "boot/firmware" / IMAGE).exists()
    assert "install ok installed" not in tree_dpkg(root, "-W", "-f", "${Status}", PACKAGE).stdout
    assert not (root / f"lib/modules/{REL}").exists()
    assert pikernels.installed(board)[0] == []


@pytest.mark.slow
def test_a_package_without_preempt_rt_is_refused_before_the_reboot(official):
    board, root = official(rt=False)
    boot_id = board.boot_state[2]
    with pytest.raises(UserError, match=rf"/boot/config-{re.escape(REL)} on board has no CONFIG_PREEMPT_RT=y: .* not "
                                        "an RT kernel, so nothing was rebooted"):
        deploy_official(board)
    assert board.boot_state[2] == boot_id
    assert "install ok installed" not in tree_dpkg(root, "-W", "-f", "${Status}", PACKAGE).stdout


def test_a_rooted_target_without_its_own_apt_is_refused(sshd, pi_root):
    kernels = make_pi4_tree(pi_root)  # no etc/apt/apt.conf: apt would install into this machine
    board = SimulatedPi(SshTransport("board", ssh_config=sshd.ssh_config), pi_root, kernels)
    with pytest.raises(UserError, match="lives under .* but has no .*/etc/apt/apt.conf: apt would install into the "
                                        "machine around it"):
        deploy_official(board)
    assert board.running == OLD.release


def test_official_on_a_board_that_is_no_64bit_pi(sshd, capsys, tmp_path):
    assert main(["deploy", "board", "--official", "--ssh-config", str(sshd.ssh_config)]) == 2
    err = capsys.readouterr().err
    assert "Raspberry Pi's RT kernel (kernel8_rt.img) is 64-bit" in err and len(err.strip().splitlines()) == 1
    assert main(["deploy", "board", str(tmp_path), "--official"]) == 2
    assert "give either --official or a bundle" in capsys.readouterr().err
    assert main(["deploy", "board"]) == 2
    assert "deploy what?" in capsys.readouterr().err


def test_target_apt_get_argv():
    class NoFiles:
        name = "t"

        def exists(self, path):
            return True
    assert Device(NoFiles()).apt_get("install", "x") == ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y",
                                                         "-q", "install", "x"]
    assert Device(NoFiles(), "/srv/pi").apt_get("update")[2] == "APT_CONFIG=/srv/pi/etc/apt/apt.conf"
