"""The Pi 5's 16K pages (issue 25 item 3).

The mechanism in a few minutes: the qemu-virt-arm64 board with
CONFIG_ARM64_16K_PAGES=y, built with RT, booted on QEMU virt with the
Cortex-A76 (the Pi 5's core, which has the 16K granule): /init prints the
page size user space gets, and the boot test holds it to the bundle's
.config.  The pi5 board's mainline flavour gets the same option from its
fragment: proven on its real configuration (arm64 defconfig + the fragment,
read back); the whole pi5 build and boot is bench/pi_matrix.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtforge.device.deploy.bundle import open_bundle
from rtforge.kernel.boottest import boot_test, expected_page_size
from rtforge.kernel.build import BuildSpec, build_kernel
from rtforge.kernel.kconfig import read_config
from rtforge.results.store import Store


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.kernel
@pytest.mark.guest
def test_16k_kernel_boots_with_16k_pages_and_its_signed_modules_headers_rule_holds(tmp_path):
    """One kernel build for two facts (a cold build is minutes of CI): the
    16K kernel boots with 16K pages, and -- built with signed modules --
    its headers package follows the sign-file rule (kernel/headers.py):
    without the board's libcrypto here the package is left out, said why,
    and the kernel is built and packaged all the same."""
    result = build_kernel(BuildSpec(board="qemu-virt-arm64", source="debian:6.12", dist=tmp_path / "dist",
                                    options=["CONFIG_ARM64_16K_PAGES=y", "CONFIG_MODULES=y", "CONFIG_MODULE_SIG=y"]))
    bundle = open_bundle(result.dist)
    config = read_config(bundle.member(f"config-{result.release}"))
    assert config["ARM64_16K_PAGES"] == "y" and config["PAGE_SHIFT"] == "14"
    assert expected_page_size(bundle) == 16384
    [q] = bundle.manifest["emulated"]
    assert (q["machine"], q["cpu"]) == ("virt", "cortex-a76")
    [r] = boot_test(bundle, Store(tmp_path / "results"), probe_s=1)
    console = r.console_log.read_text(errors="replace")
    assert r.passed, (r.sentence, console[-2000:])
    assert r.page_size == 16384 and "RTFORGE-PAGESIZE 16384" in console
    assert "16K pages" in r.sentence
    # the sign-file rule, whichever way this machine decides it
    headers = bundle.manifest["headers"]
    debs = sorted(p.name for p in result.dist.glob("*.deb"))
    assert any(d.startswith("linux-image-") for d in debs)
    if Path("/usr/lib/aarch64-linux-gnu/libcrypto.so").exists():
        assert headers["deb"] and any(d.startswith("linux-headers-") for d in debs), headers
    else:
        assert headers["deb"] is None and "libssl-dev:arm64" in headers["why"], headers
        assert not any(d.startswith("linux-headers-") for d in debs)


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
