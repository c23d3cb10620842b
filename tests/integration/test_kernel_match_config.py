"""`kernel build --match ... --config-only` on full trees: boards running
Raspberry Pi OS kernels (64-bit Pi 4, Pi 5 with 16K pages, 32-bit Pi 4) and
Debian's own arm64 kernel, matched and configured, nothing compiled (a full
Pi configuration builds for an hour and more: bench/pi_matrix.py).

The raspberrypi/linux stand-in is tests/support/rpirepo.py's (the
conftest's rpi_git fixture).
The boards' running configurations are made from those defconfigs by Kbuild
here, not by rtforge.  Debian's board runs Debian's real arm64
configuration (the linux-config-6.12 package of the installed
linux-source-6.12's version, fetched by rtforge's own apt for arm64)."""

from __future__ import annotations

import lzma
import subprocess
from pathlib import Path

import pytest

from rtforge.device import LocalTransport
from rtforge.errors import UserError
from rtforge.kernel import debian as kdebian
from rtforge.kernel import fetch
from rtforge.kernel.build import BuildSpec, build_kernel
from rtforge.kernel.kconfig import read_config
from rtforge.kernel.running import read_running

from ..support.rpirepo import TAG
from ..support.runningboards import debian, rpios

pytestmark = [pytest.mark.slow, pytest.mark.kernel, pytest.mark.usefixtures("kernel_cache_cleanup")]
PI4, PI5 = "Raspberry Pi 4 Model B Rev 1.4", "Raspberry Pi 5 Model B Rev 1.0"


def running_config(tree: Path, work: Path, arch: str, cross: str, defconfig: str) -> str:
    """What the board runs: Kbuild's own defconfig + olddefconfig."""
    subprocess.run(["make", "-s", "-C", str(tree), f"O={work}", f"ARCH={arch}", f"CROSS_COMPILE={cross}",
                    defconfig], check=True, capture_output=True)
    return (work / ".config").read_text()


def explained(result, running: dict[str, str]) -> dict[str, dict]:
    """The report against the two .config files, compared here."""
    built = read_config(result.config_path)
    differ = {s for s in set(running) | set(built) if running.get(s, "n") != built.get(s, "n")}
    reported = {c.symbol: c for c in result.changes}
    assert differ == set(reported), differ ^ set(reported)
    return reported


@pytest.mark.parametrize("board, release, model, defconfig", [
    ("pi4-64", "6.12.117+rpt-rpi-v8", PI4, "bcm2711_defconfig"),
    ("pi5", "6.12.117+rpt-rpi-2712", PI5, "bcm2712_defconfig"),
])
def test_raspberry_pi_os_64_bit(rpi_git, tmp_path, board, release, model, defconfig):
    repo, commit = rpi_git
    config = running_config(repo, tmp_path / "k", "arm64", "aarch64-linux-gnu-", defconfig)
    root = rpios(release, "aarch64", model, "arm64", config=config, changelog_lines=[f"Built from {TAG}"])
    running = read_running(LocalTransport(), str(root.write(tmp_path / "board")))
    result = build_kernel(BuildSpec(board=board, match=running, match_host="local", dist=tmp_path / "dist",
                                    config_only=True))
    plan = result.match
    assert plan.spec == f"rpi:{TAG}" and plan.exact and not plan.instead, plan.instead
    built = read_config(result.config_path)
    assert built["PREEMPT_RT"] == "y" and built["LOCALVERSION"] == read_config_text(config)["LOCALVERSION"]
    if board == "pi5":   # the running kernel's page size comes with its configuration
        assert built["ARM64_16K_PAGES"] == "y"
    reported = explained(result, running.config)
    assert not [c.line() for c in reported.values() if c.kind == "kconfig"], "every difference has a cause"
    assert reported["PREEMPT"].why.startswith("one choice with PREEMPT_RT")
    assert result.config.base.endswith("'s /proc/config.gz")


def read_config_text(text: str) -> dict[str, str]:
    from rtforge.kernel.kconfig import parse_config
    return parse_config(text)


def test_raspberry_pi_os_32_bit_needs_an_rt_patch_on_6_12(rpi_git, tmp_path):
    """rpi-6.12.y's arch/arm does not select ARCH_SUPPORTS_RT (the 32-bit RT patch adds it): the
    matched tree is refused for RT in one sentence naming --rt-patch."""
    repo, _ = rpi_git
    config = running_config(repo, tmp_path / "k", "arm", "arm-linux-gnueabihf-", "bcm2711_defconfig")
    root = rpios("6.12.117+rpt-rpi-v7l", "armv7l", PI4, "armhf", config=config, config_at="boot")
    running = read_running(LocalTransport(), str(root.write(tmp_path / "board")))
    with pytest.raises(UserError, match="--rt-patch") as e:
        build_kernel(BuildSpec(board="pi4-32", match=running, dist=tmp_path / "dist", config_only=True))
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def debian_arm64_config(src612):
    """Debian's real arm64 kernel configuration of the installed 6.12
    version, from its linux-config-6.12 package (rtforge's own apt, arm64)."""
    version = src612.source_id.split("=", 1)[1]
    apt = kdebian.PrivateApt(fetch.kernel_cache() / "apt-arm64", arch="arm64")
    apt.update(None)
    deb = apt.download("linux-config-6.12", version, None)
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    member = next(w for line in listing.splitlines() for w in line.split()[-1:]
                  if w.endswith("config.arm64_none_arm64.xz"))
    data = subprocess.run(f"dpkg-deb --fsys-tarfile '{deb}' | tar -xO '{member}'", shell=True, capture_output=True,
                          check=True).stdout
    return version, lzma.decompress(data).decode()


def test_debian_arm64_kernel_on_a_pi_4(debian_arm64_config, tmp_path):
    version, config = debian_arm64_config
    root = debian("6.12.117+deb12-arm64", version, config=config)
    running = read_running(LocalTransport(), str(root.write(tmp_path / "board")))
    result = build_kernel(BuildSpec(board="pi4-64", match=running, match_host="local", dist=tmp_path / "dist",
                                    config_only=True))
    plan = result.match
    assert plan.spec == f"debian:6.12={version}" and plan.origin == "debian" and plan.exact, plan.instead
    built = read_config(result.config_path)
    assert built["PREEMPT_RT"] == "y" and built["MODULES"] == "y"
    reported = explained(result, running.config)
    # what the build asked for beyond rt and latency: only the files of Debian's build tree, each said
    fixed = {s for s, c in reported.items() if c.why == "asked for (match-fixups)"}
    assert {line.split("=")[0].removeprefix("CONFIG_") for line in plan.instead} == fixed
    unexplained = [c.line() for c in reported.values() if c.kind == "kconfig"]
    assert not unexplained, unexplained


def test_no_config_on_the_board_uses_the_defconfig_and_says_so(tmp_path):
    root = rpios("6.12.117+rpt-rpi-v8", "aarch64", PI4, "arm64", config=None)
    running = read_running(LocalTransport(), str(root.write(tmp_path / "board")))
    result = build_kernel(BuildSpec(board="pi4-64", source="debian:6.12", match=running, dist=tmp_path / "dist",
                                    config_only=True))
    assert result.config.base == "defconfig" and result.changes == []
    assert result.match.instead[-1] == (f"{running.host} has no /proc/config.gz and no /boot/config-"
                                        "6.12.117+rpt-rpi-v8: configured from board pi4-64's defconfig instead")


def test_a_debian_version_no_suite_offers_is_said(src612, tmp_path):
    """The board runs a 6.12 that Debian no longer publishes: rtforge's apt is
    asked, and the newest 6.12 is used instead, said so."""
    gone = "6.12.9-1~bpo12+1"
    root = debian("6.12.9+bpo-arm64", gone, config=None)
    running = read_running(LocalTransport(), str(root.write(tmp_path / "board")))
    result = build_kernel(BuildSpec(board="pi4-64", match=running, dist=tmp_path / "dist", config_only=True))
    plan = result.match
    assert plan.spec == "debian:6.12" and not plan.exact
    assert plan.instead[0].startswith(f"no Debian suite offers linux-source-6.12 {gone} any more (offered: ")
    assert plan.instead[0].endswith(": built from debian:6.12 instead")
    assert f"{running.host} runs 6.12.9, and debian:6.12 is {src612.version}" in plan.instead[1]
