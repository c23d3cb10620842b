"""A real Pi kernel on an emulated Pi: the Pi 1/Zero board (pi1), built
from Debian's linux-source-7.3 with rtforge's rt and latency fragments,
boot-tested on QEMU's raspi0 (Pi Zero) and raspi1ap (Pi A+), both ARM1176,
with the ARMv6 probe running inside.

7.3 is where 32-bit ARM selects ARCH_SUPPORTS_RT, so the Pi 1 needs no RT
patch any more.

The kernel booted here is as small as what these tests prove: allnoconfig
plus what the two emulated Pis need (tests/fixtures/kernel/pi1-lean.config:
the BCM2835's machine support, the PL011 console, an initramfs, the
power-domain driver the quirk test needs), built as `rtforge kernel build
--board pi1 --defconfig allnoconfig -k ...` (the session's pi1 test kernel,
tests/support/testkernels.py).  The board's own configuration,
bcm2835_defconfig with RT, is what the defconfig test below reads
(configured, not compiled), and its whole build boots in bench/pi_matrix.py
(make matrix).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources

import pytest

from rtforge.cli import main
from rtforge.device.deploy.bundle import open_bundle
from rtforge.kernel.boottest import boot_test
from rtforge.kernel.build import BuildSpec, build_kernel
from rtforge.kernel.kconfig import read_config
from rtforge.results.store.runstore import Store

from ..support import testkernels

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.kernel]
BOARD, SOURCE = "pi1", "debian:7.3"
LEAN = testkernels.FIXTURES / "pi1-lean.config"


@pytest.fixture
def built(pi1_kernel):
    return pi1_kernel


@pytest.fixture(scope="module")
def configured(tmp_path_factory):
    """The board's own configuration (bcm2835_defconfig with RT), configured only: its .config, read at once (the
    build directory is the board's, which the next build configures again)."""
    result = build_kernel(BuildSpec(board=BOARD, source=SOURCE, dist=tmp_path_factory.mktemp("cfg"),
                                    config_only=True))
    return read_config(result.config_path)


def _kconfig_entries(tree) -> dict[str, str]:
    """symbol -> its Kconfig entry's text (from `config X` to the next entry),
    and for every member of a `choice` block also the names of its siblings."""
    entries: dict[str, str] = {}
    for kconfig in tree.rglob("Kconfig*"):
        text = kconfig.read_text(errors="replace")
        for m in re.finditer(r"^(?:menu)?config (\w+)\n(.*?)(?=^(?:menu)?config |^choice|^endchoice|^endmenu|\Z)",
                             text, re.M | re.S):
            entries[m.group(1)] = entries.get(m.group(1), "") + m.group(2)
        for block in re.findall(r"^choice\n(.*?)^endchoice", text, re.M | re.S):
            members = re.findall(r"^config (\w+)", block, re.M)
            for name in members:
                entries[name] = entries.get(name, "") + "\nchoice: " + " ".join(members)
    return entries


def test_the_booted_pi1_kernel_is_rt_armv6_and_lean(built):
    bundle = open_bundle(built.dist)
    bundle.verify()
    config = read_config(next(bundle.root.glob("config-*")))
    assert config["PREEMPT_RT"] == "y" and config["ARCH_MULTI_V6"] == "y" and config["ARCH_BCM2835"] == "y"
    assert [q["machine"] for q in bundle.manifest["emulated"]] == ["raspi0", "raspi1ap"]
    assert bundle.manifest["machines"] == ["armv6l"]
    assert bundle.manifest["reproducer"] == ("rtforge kernel build --board pi1 --source debian:7.3 --defconfig "
                                             f"allnoconfig -k {LEAN} --no-debs")
    for name, value in read_config(LEAN).items():       # as asked: none was dropped by Kconfig
        assert config.get(name, "n") == value, name
    # lean: what the defconfig has and no boot test touches is not there
    assert all(config.get(k, "n") == "n" for k in ("NET", "USB_SUPPORT", "MMC", "DRM", "SOUND", "MODULES")), config
    assert config.get("DEBUG_INFO", "n") == "n"


def test_pi1_is_bcm2835_defconfig_with_preempt_rt(configured, src73, tmp_path):
    config = configured
    assert config["PREEMPT_RT"] == "y" and config["ARCH_MULTI_V6"] == "y" and config["ARCH_BCM2835"] == "y"
    # The judge: Kconfig's own result for the plain defconfig (no rtforge).
    # Every option it keeps survives in rtforge's .config, but those that
    # rtforge's fragments set (or a sibling in the same choice), and those
    # whose Kconfig entry cannot coexist with PREEMPT_RT.
    subprocess.run(["make", "-s", f"O={tmp_path}", "ARCH=arm", "CROSS_COMPILE=arm-linux-gnueabihf-",
                    "bcm2835_defconfig"], cwd=src73.path, check=True, capture_output=True)
    plain = read_config(tmp_path / ".config")
    asked = read_config(src73.path / "arch/arm/configs/bcm2835_defconfig")
    fragments = set()
    for name in ("rt", "latency", "latency-optional"):
        fragments |= set(read_config(resources.files("rtforge.data") / "fragments" / f"{name}.config"))
    entries = _kconfig_entries(src73.path)
    changed = {k for k in asked if k in plain and config.get(k, "n") != plain[k]}
    assert changed, "the RT and latency fragments change something (HZ at least): the comparison is blind"
    unexplained = set()
    for k in changed:
        entry = entries.get(k, "")
        choice = set(re.findall(r"choice: (.*)", entry)[0].split()) if "choice: " in entry else set()
        if k in fragments or choice & fragments or re.search(r"depends on .*!PREEMPT_RT", entry):
            continue
        unexplained.add(k)
    assert not unexplained, sorted(unexplained)


def test_pi1_boots_as_preempt_rt_on_each_emulated_pi_with_the_armv6_probe(built, tmp_path, capsys):
    rd = tmp_path / "results"
    rc = main(["kernel", "boot-test", str(built.dist), "--results-dir", str(rd), "--probe-s", "3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    for machine in ("raspi0", "raspi1ap"):
        assert f"passed: {machine}: {built.release} booted on QEMU {machine}" in out
    # what the emulated boot added for QEMU's gaps is said, with the gap
    assert out.count("quirk initcall_blacklist=bcm2835_power_driver_init: QEMU does not model") == 2, out
    assert out.count("quirk -icount shift=0,sleep=off: the BCM2835 system timer") == 2, out
    store = Store(rd)
    runs = [store.load(r.run_id) for r in store.all_rows()]
    assert sorted(r.host for r in runs) == ["QEMU raspi0", "QEMU raspi1ap"]
    for run in runs:
        assert run.system["machine"] == "armv6l" and run.system["preempt_model"] == "rt"
        assert run.system["kernel_release"] == built.release
        assert all(c.count > 100 for c in run.cpus), [c.count for c in run.cpus]
    logs = re.findall(r"console log: (\S+)", out)
    assert len(logs) == 2 and all("PREEMPT_RT" in open(p).read() for p in logs)


def _variant(built, tmp_path, change) -> object:
    """A copy of the bundle whose manifest is changed (manifest.json is not
    among the files it hashes)."""
    copy = tmp_path / "bundle"
    shutil.copytree(built.dist / "bundle", copy)
    m = json.loads((copy / "manifest.json").read_text())
    change(m)
    (copy / "manifest.json").write_text(json.dumps(m))
    return open_bundle(copy)


def test_without_its_quirk_raspi0_panics_and_the_boot_test_names_the_function(built, tmp_path):
    """The quirk is needed: QEMU has no BCM2835 power-domain block."""
    def drop_quirk(m):
        m["emulated"] = [q for q in m["emulated"] if q["machine"] == "raspi0"]
        m["emulated"][0]["append"] = m["emulated"][0]["append"].replace(
            "initcall_blacklist=bcm2835_power_driver_init", "")
    [r] = boot_test(_variant(built, tmp_path, drop_quirk), Store(tmp_path / "results"), timeout_s=300)
    assert not r.passed and r.diagnosis.kind == "panic"
    assert r.diagnosis.function == "bcm2835_power_probe", r.sentence
    assert "Kernel panic - not syncing" in r.sentence and r.seconds < 120     # stopped at the panic, not the timeout
    assert "bcm2835_power_probe" in r.console_log.read_text()


def test_armv7_programs_on_a_pi_1_are_named_as_such(built, tmp_path):
    """The initramfs programs follow the manifest's uname -m: armv7l ones die of SIGILL on the ARM1176."""
    def armv7(m):
        m["emulated"] = [q for q in m["emulated"] if q["machine"] == "raspi0"]
        m["machines"] = ["armv7l"]
    [r] = boot_test(_variant(built, tmp_path, armv7), Store(tmp_path / "results"), timeout_s=300)
    assert not r.passed and r.diagnosis.kind == "panic"
    assert "Attempted to kill init! exitcode=0x00000004" in r.sentence
    assert "/init died of SIGILL" in r.sentence
