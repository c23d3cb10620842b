"""What a kernel .deb says before it is tried (device/deploy/deb.py): the
uname -v marker from its own /boot/config-<release>, read through dpkg-deb
without installing anything."""

from __future__ import annotations

import pytest

from rtforge.device.deploy.deb import KernelDeb, deb_marker
from rtforge.errors import UserError

from ..support.aptrepo import PACKAGE, build_kernel_deb

RELEASE = "6.12.0-rt5-rpi"


def test_the_marker_is_the_packages_own_configuration(tmp_path):
    rt, _ = build_kernel_deb(tmp_path / "rt", RELEASE)
    plain, _ = build_kernel_deb(tmp_path / "plain", RELEASE, rt=False)
    assert deb_marker(KernelDeb(rt, PACKAGE, "1", "arm64", RELEASE)) == "PREEMPT_RT"
    assert deb_marker(KernelDeb(plain, PACKAGE, "1", "arm64", RELEASE)) is None
    assert deb_marker(KernelDeb(rt, PACKAGE, "1", "arm64", "6.1.0-other")) is None    # no config of that release


def test_a_damaged_package_is_one_sentence(tmp_path):
    deb, _ = build_kernel_deb(tmp_path, RELEASE)
    damaged = tmp_path / "damaged.deb"
    damaged.write_bytes(deb.read_bytes()[:-100])   # its data cut short
    with pytest.raises(UserError, match="damaged.deb is damaged: its files cannot be read"):
        deb_marker(KernelDeb(damaged, PACKAGE, "1", "arm64", RELEASE))
