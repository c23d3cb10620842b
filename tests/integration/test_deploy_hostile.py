"""Bundles rtforge cannot trust, deployed to a simulated Pi over the real
loopback sshd (issue 37): a manifest that names a .deb out of the bundle,
puts lines into config.txt or switches the RT check off, and a bundle folder
holding a FIFO or a setuid module -- each refused before the board changes,
and what is installed is what was verified (the manifest's own bytes, the
modes a build makes).  The firmware and reboots are simulated
(tests/support/simpi.py); the files, sshd, tar and sh are real."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from rtforge.device import SshTransport
from rtforge.device.deploy.bundle import open_bundle
from rtforge.device.deploy.pibundle import deploy_pi, prefix_for
from rtforge.device.deploy.tryonce import STAGING
from rtforge.errors import UserError

from ..support.aptrepo import make_apt_tree
from ..support.simpi import SimKernel, SimulatedPi, make_bundle, make_pi4_tree

pytestmark = pytest.mark.root
RT = "6.12.0-rt5-rtforge"
RT_VERSION = "#1 SMP PREEMPT_RT Fri Nov 20 12:00:00 UTC 2026"
MODULE = f"lib/modules/{RT}/kernel/drivers/rtforge-test.ko"


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for top in ("boot", "lib", "var", "tmp"):
        for p in sorted((root / top).rglob("*")) if (root / top).is_dir() else ():
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def edit_manifest(bundle: Path, **changes) -> None:
    m = json.loads((bundle / "manifest.json").read_text())
    m.update(changes)
    (bundle / "manifest.json").write_text(json.dumps(m))


@pytest.fixture
def pi(sshd, tmp_path, pi_root):
    """(board, bundle folder, board root): the kernel the bundle holds boots
    as `version` says, with /sys/kernel/realtime when `realtime`."""
    def make(version: str = RT_VERSION, realtime: bool = True):
        kernels = make_pi4_tree(pi_root)
        bundle_dir, sha = make_bundle(tmp_path / "bundle", RT)
        kernels[sha] = SimKernel(RT, version, "boots", realtime)
        return SimulatedPi(SshTransport("board", ssh_config=sshd.ssh_config), pi_root, kernels), bundle_dir, pi_root
    return make


def refused(board, bundle_dir: Path, root: Path, words: str, **kw) -> None:
    """Refused with one sentence before anything on the board changed."""
    before = snapshot(root)
    with pytest.raises(UserError, match=words) as e:
        deploy_pi(board, open_bundle(bundle_dir), **kw)
    assert "\n" not in str(e.value)
    assert snapshot(root) == before


# ---------------------------------------------------------------- 3. the headers .deb is a verified file

def test_a_headers_deb_out_of_the_bundle_is_never_installed(pi, tmp_path):
    """A manifest whose headers.deb was ../../../../../tmp/x.deb passed
    `kernel verify`, and the board ran `apt-get install` on that path as
    root: here a package anyone could have put there, which the board's real
    apt and dpkg installed (into the simulated Pi's own tree)."""
    board, bundle_dir, root = pi()
    make_apt_tree(root, "http://127.0.0.1:9/")  # nothing is fetched: apt is given a file
    pkg = tmp_path / "anyones"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "etc").mkdir()
    (pkg / "etc/anyones").write_text("installed by anyone\n")
    (pkg / "DEBIAN/control").write_text("Package: anyones\nVersion: 1\nArchitecture: all\n"
                                        "Maintainer: nobody <nobody@rtforge.invalid>\nDescription: not verified\n")
    evil = "../../../../../tmp/x.deb"  # from the staging folder, to where anyone on the board may write
    landing = Path(os.path.normpath(f"{board.path(STAGING)}/{RT}/{evil}"))
    landing.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(pkg), str(landing)], check=True, capture_output=True)
    edit_manifest(bundle_dir, headers={"deb": evil, "package": f"linux-headers-{RT}"})
    refused(board, bundle_dir, root, r"headers package file '../../../../../tmp/x.deb', which is not "
                                     r"headers/<name>.deb", headers=True)
    assert not (root / "etc/anyones").exists()
    edit_manifest(bundle_dir, headers={"deb": "headers/x.deb", "package": f"linux-headers-{RT}"})
    refused(board, bundle_dir, root, "which it does not list", headers=True)


# ---------------------------------------------------------------- 4. manifest strings never reach config.txt

@pytest.mark.parametrize("board_name", ["pi4-64\narm_freq=9999\nover_voltage=8\n# rtforge end",
                                        "pi4-64\rarm_freq=9999", "pi4-64\u2028over_voltage=8"])
def test_a_board_name_with_line_breaks_writes_nothing_into_config_txt(pi, board_name):
    """A board value with newlines wrote arm_freq=9999 and over_voltage=8
    into config.txt, committed after the try; an early `# rtforge end` broke
    the block for the next deploy; a lone CR landed too."""
    board, bundle_dir, root = pi()
    edit_manifest(bundle_dir, board=board_name)
    refused(board, bundle_dir, root, "has a board .* that is not a plain name")
    assert b"arm_freq" not in (root / "boot/firmware/config.txt").read_bytes()


# ---------------------------------------------------------------- 5. the RT check is rtforge's, not the manifest's

@pytest.mark.parametrize("marker", ["", "NOTRT", "SMP"])
def test_the_manifest_cannot_switch_the_rt_check_off(pi, marker):
    """uname_v_marker "" skipped the check, and a `#1 SMP PREEMPT` kernel was
    committed as the default; a marker of the manifest's choosing matched it."""
    board, bundle_dir, root = pi(version="#1 SMP PREEMPT Fri Nov 20 12:00:00 UTC 2026", realtime=False)
    edit_manifest(bundle_dir, uname_v_marker=marker)
    refused(board, bundle_dir, root, "not one rtforge writes")


@pytest.mark.slow
def test_what_is_installed_is_the_manifest_that_was_checked(pi):
    """The manifest was re-serialised from what was parsed; now its very
    bytes go to the board as rtforge.json, checked there by their sha256."""
    board, bundle_dir, root = pi()
    result = deploy_pi(board, open_bundle(bundle_dir))
    assert result.ok, result.message
    installed = root / "boot/firmware" / prefix_for(RT) / "rtforge.json"
    assert installed.read_bytes() == (bundle_dir / "manifest.json").read_bytes()


# ---------------------------------------------------------------- 6. a bundle folder: regular files, plain folders

@pytest.mark.parametrize("kind", ["fifo", "block device", "setuid module", "world-writable module"])
def test_a_bundle_folder_with_a_special_file_is_refused(pi, kind):
    """A bundle folder with a FIFO or a block device node, or a listed module
    of mode 4777, was installed as such (-rwsrwxrwx in /lib/modules)."""
    board, bundle_dir, root = pi()
    if kind == "fifo":
        os.mkfifo(bundle_dir / f"lib/modules/{RT}/fifo")
    elif kind == "block device":
        os.mknod(bundle_dir / f"lib/modules/{RT}/sda", 0o666 | stat.S_IFBLK, os.makedev(8, 0))
    else:
        (bundle_dir / MODULE).chmod(0o4777 if kind == "setuid module" else 0o666)
    refused(board, bundle_dir, root, "FIFO, a device node or a socket" if kind in ("fifo", "block device")
            else "set-id, sticky or writable by anyone")
    assert not (root / f"lib/modules/{RT}").exists()


@pytest.mark.slow
def test_modes_are_normalised_on_the_board(pi):
    """What the build would make, whatever the folder's modes: a group-writable
    module (umask 002) and folder land as 0644 and 0755."""
    board, bundle_dir, root = pi()
    (bundle_dir / MODULE).chmod(0o664)
    (bundle_dir / MODULE).parent.chmod(0o775)
    result = deploy_pi(board, open_bundle(bundle_dir))
    assert result.ok, result.message
    assert stat.S_IMODE((root / MODULE).stat().st_mode) == 0o644
    assert stat.S_IMODE((root / MODULE).parent.stat().st_mode) == 0o755
