"""The Pi 5's 16K pages (issue 25 item 3).

The mechanism -- a 16K RT kernel that boots with 16K pages on QEMU virt's
Cortex-A76 -- is proven by test_kernel_build.py's kernel, which has them
(one cold build for both).  Here: the pi5 board's mainline flavour gets the
same option from its fragment, proven on its real configuration (arm64
defconfig + the fragment, read back); the whole pi5 build and boot is
bench/pi_matrix.py's."""

from __future__ import annotations

import pytest

from rtforge.kernel.build import BuildSpec, build_kernel
from rtforge.kernel.kconfig import read_config


@pytest.mark.slow
@pytest.mark.kernel
def test_pi5_mainline_flavour_has_16k_pages(tmp_path):
    """Configured only (the build is the bench's): arm64 defconfig plus
    the pi5 board's fragment, as Kbuild leaves it."""
    result = build_kernel(BuildSpec(board="pi5", source="debian:6.12", dist=tmp_path, config_only=True))
    assert "arm64-16k-pages" in result.config.fragments
    config = read_config(result.config_path)
    assert config["ARM64_16K_PAGES"] == "y" and config.get("ARM64_4K_PAGES", "n") == "n"
    assert config["PREEMPT_RT"] == "y"
    # pi4-64 from the same tree keeps mainline's 4K: the fragment is the pi5 board's alone
    other = build_kernel(BuildSpec(board="pi4-64", source="debian:6.12", dist=tmp_path, config_only=True))
    assert read_config(other.config_path)["ARM64_4K_PAGES"] == "y"
