"""`kernel build --match` for real, small enough for the test suite: a board
running a (simulated) Debian kernel of the qemu-virt-arm64 kind -- its
configuration made here by Kbuild itself (allnoconfig, the virt fragment,
loadable modules with MODVERSIONS, Debian's arm64-16k flavour's 16K pages,
voluntary preemption, HZ 250, transparent hugepages), its package the
installed linux-source-6.12's exact version -- is matched, built with RT,
and then:

  - the built .config differs from the running one only by what the
    report lists (both files read from disk and compared here, with
    Kconfig's own rule that a missing bool is n), each difference with a
    cause that is a line of the tree's real Kconfig;
  - the bundle carries linux-headers whose build programs are aarch64 ELF
    (read from the .deb here) with the build's Module.symvers;
  - an out-of-tree module is built against that package in a Debian arm64
    root under qemu-aarch64, as DKMS builds one on a board (dpkg -i, make
    -C /lib/modules/<release>/build M=...);
  - the boot test loads that module into the same kernel in QEMU: the
    guest's console shows its message and /proc/modules lists it, with the
    guest's page size 16K; the module with a non-RT kernel's vermagic is
    refused by the kernel and fails the same boot test.

The matched configuration comes out as the session's arm64 test kernel's
(tests/support/testkernels.py): one build directory, one final .config, so
this build compiles nothing and packages (the matching, the report and the
headers are this build's own).

Then the same for a Raspberry Pi OS board (linux-image-6.12.117+rpt-rpi-v8,
its changelog naming the tag of the raspberrypi/linux stand-in,
tests/support/rpirepo.py) running the smallest configuration that still
shows the matching (allnoconfig with its -v8, HZ 250 and voluntary
preemption): matched from that tag, compiled and packaged for the pi4-64
board, its .config differing from the board's only by what the report
lists.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rtforge.device import LocalTransport
from rtforge.device.deploy.bundle import open_bundle
from rtforge.kernel.boottest import boot_test
from rtforge.kernel.build import BuildSpec, build_kernel
from rtforge.kernel.kconfig import parse_config, read_config
from rtforge.kernel.running import read_running
from rtforge.kernel.sources import prepare_source
from rtforge.results.store.runstore import Store

from ..support.qemu_user import EM_AARCH64, elf_facts
from ..support.rpirepo import TAG
from ..support.runningboards import debian, rpios
from ..support.testkernels import build_test_kernel

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.kernel, pytest.mark.guest]
FRAGMENTS = Path(__file__).resolve().parents[2] / "src/rtforge/data/fragments"
EXTMOD = Path(__file__).resolve().parents[1] / "fixtures/extmod"
# What the simulated Debian board runs on top of the virt fragment: a kernel
# a distribution could ship (Debian's arm64-16k flavour: its configurations
# leave CONFIG_LOCALVERSION empty, the flavour is in the package's release),
# and options PREEMPT_RT changes.
BOARD_OPTIONS = """\
CONFIG_MODULES=y
CONFIG_MODULE_UNLOAD=y
CONFIG_MODVERSIONS=y
CONFIG_ARM64_16K_PAGES=y
CONFIG_HZ_250=y
CONFIG_PREEMPT_VOLUNTARY=y
CONFIG_TRANSPARENT_HUGEPAGE=y
CONFIG_LOCALVERSION=""
"""
# The Raspberry Pi OS board: the least that shows the matching (its -v8 kept,
# two options RT changes) on allnoconfig, so the build is small.
RPI_OPTIONS = """\
CONFIG_HZ_250=y
CONFIG_PREEMPT_VOLUNTARY=y
CONFIG_LOCALVERSION="-v8"
"""


def kbuild_config(tree: Path, work: Path, options: str, fragments: tuple[Path, ...] = ()) -> str:
    """The simulated board's configuration, made by Kbuild (not by rtforge)."""
    make = ["make", "-s", "-C", str(tree), f"O={work}", "ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-"]
    subprocess.run([*make, "allnoconfig"], check=True, capture_output=True)
    (work / "board.config").write_text(options)
    subprocess.run(["bash", str(tree / "scripts/kconfig/merge_config.sh"), "-m", "-O", str(work),
                    str(work / ".config"), *map(str, fragments), str(work / "board.config")],
                   cwd=work, check=True, capture_output=True)
    subprocess.run([*make, "olddefconfig"], check=True, capture_output=True)
    return (work / ".config").read_text()


def differing(before: dict[str, str], built: dict[str, str]) -> set[str]:
    """The symbols two .config files disagree on.  Kconfig writes a bool only
    when it is visible: a missing one is n (and a missing int or string is
    no value, which no n equals either way)."""
    return {s for s in set(before) | set(built) if before.get(s, "n") != built.get(s, "n")}


@pytest.fixture(scope="module")
def matched(src612, tmp_path_factory):
    work = tmp_path_factory.mktemp("match")
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "linux-source-6.12"], capture_output=True,
                               text=True, check=True).stdout
    config = kbuild_config(src612.path, work / "kconfig", BOARD_OPTIONS, (FRAGMENTS / "qemu-virt-arm64.config",))
    root = debian("6.12.117+deb12-arm64-16k", installed, model="", config=config).write(work / "board")
    running = read_running(LocalTransport(), str(root))
    result = build_test_kernel(BuildSpec(board="qemu-virt-arm64", match=running, match_host="local",
                                         dist=work / "dist"))
    return result, running, root


def test_only_rt_and_what_the_report_lists_differ(matched):
    result, running, root = matched
    plan = result.match
    assert plan.spec.startswith("debian:6.12=") and plan.exact and not plan.instead, plan.instead
    bundle = open_bundle(result.dist)
    built = read_config(bundle.member(f"config-{result.release}"))
    before = read_config(bundle.member(f"match/config-{running.release}"))
    assert before == read_config(root / f"boot/config-{running.release}")    # the board's own file, kept

    differ = differing(before, built)
    reported = {d["symbol"]: d for d in bundle.manifest["match"]["differences"]}
    assert differ == set(reported), (differ ^ set(reported))
    assert built["PREEMPT_RT"] == "y" and before.get("PREEMPT_RT", "n") == "n"
    assert {s for s, d in reported.items() if d["kind"] == "asked"} >= {"PREEMPT_RT", "EXPERT", "HZ_1000"}
    assert not [d for d in reported.values() if d["kind"] == "kconfig"], "every difference has a cause"
    # the causes are Kconfig's own lines, in the tree the bundle says it was built from
    assert bundle.manifest["source_id"] == f"debian:linux-source-6.12={plan.spec.split('=', 1)[1]}"
    kconfig = (prepare_source("debian:6.12").path / "mm/Kconfig").read_text()
    thp = reported["TRANSPARENT_HUGEPAGE"]["why"]
    assert re.fullmatch(r"depends on (.*): PREEMPT_RT is now y", thp)
    assert re.search(r"^\s*depends on " + re.escape(thp.split(": ")[0].removeprefix("depends on ")) + r"$",
                     kconfig, re.M)
    assert reported["PREEMPT_VOLUNTARY"]["why"].startswith("one choice with PREEMPT_RT")
    assert reported["HZ"]["old"] == "250" and reported["HZ"]["new"] == "1000"
    assert reported["HZ"]["why"] == "default 1000 if HZ_1000: HZ_1000 is now y"
    report = (result.dist / "match-report.txt").read_text()
    assert f"{len(reported)} options differ from the running kernel's:" in report
    assert all(f"CONFIG_{s} " in report for s in reported)


def test_headers_are_for_the_board(matched, tmp_path):
    result, _, _ = matched
    m = open_bundle(result.dist).manifest
    headers = m["headers"]
    assert headers["deb"] and headers["rule"] == "target", headers
    deb = result.dist / "bundle" / headers["deb"]
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    top = tmp_path / f"usr/src/linux-headers-{result.release}"
    for prog in ("scripts/basic/fixdep", "scripts/mod/modpost", "scripts/genksyms/genksyms"):
        assert elf_facts(top / prog)[0] == EM_AARCH64, prog        # the board's CPU, not this machine's
    build = result.config_path.parent
    assert hashlib.sha256((top / "Module.symvers").read_bytes()).digest() == \
        hashlib.sha256((build / "Module.symvers").read_bytes()).digest()
    assert (tmp_path / f"lib/modules/{result.release}/build").is_symlink()


@pytest.fixture(scope="module")
def module(matched, tmp_path_factory):
    """rtforge_hello.ko, built in an arm64 Debian root against the bundle's headers package."""
    from ..support.armchroot import arm64_root, run_in_root

    result, _, _ = matched
    work = tmp_path_factory.mktemp("chroot")
    root = arm64_root(work / "root")
    deb = result.dist / "bundle" / open_bundle(result.dist).manifest["headers"]["deb"]
    shutil.copy(deb, root / "tmp" / deb.name)
    shutil.copytree(EXTMOD, root / "src")
    log = work / "build.log"
    p = run_in_root(root, f"dpkg -i /tmp/{deb.name} && make -C /lib/modules/{result.release}/build M=/src modules "
                          f"&& modinfo -F vermagic /src/rtforge_hello.ko", log=log, timeout=3600)
    text = log.read_text()
    assert p.returncode == 0, text[-3000:]
    return root / "src/rtforge_hello.ko", text


def test_module_builds_against_the_headers(matched, module):
    result, _, _ = matched
    ko, log = module
    assert elf_facts(ko)[0] == EM_AARCH64
    vermagic = log.strip().splitlines()[-1]
    # what the kernel checks before it loads a module: its release, and that it is an RT kernel
    assert vermagic.startswith(f"{result.release} SMP preempt_rt mod_unload modversions aarch64"), vermagic


def test_boot_test_loads_the_module(matched, module, tmp_path):
    result, _, _ = matched
    ko, _ = module
    bundle = open_bundle(result.dist)
    [r] = boot_test(bundle, Store(tmp_path / "results"), probe_s=1, modules=[ko])
    console = r.console_log.read_text(errors="replace")
    assert r.passed, (r.sentence, console[-2000:])
    assert r.modules == {"rtforge_hello.ko": "loaded"} and r.page_size == 16384
    assert f"rtforge_hello: loaded into {result.release}, PREEMPT_RT on" in console
    assert re.search(r"^rtforge_hello \d+ ", console, re.M)           # /proc/modules, as the guest lists it
    # the check can fail: the same module with the vermagic of a kernel that is
    # not RT (what headers of the non-RT stock kernel would give it) is refused
    bad = tmp_path / "not-rt" / "rtforge_hello.ko"
    bad.parent.mkdir()
    data = ko.read_bytes()
    assert data.count(b"SMP preempt_rt mod_unload") == 1
    bad.write_bytes(data.replace(b"SMP preempt_rt mod_unload", b"SMP preempt    mod_unload"))
    [r] = boot_test(bundle, Store(tmp_path / "results"), probe_s=1, modules=[bad])
    console = r.console_log.read_text(errors="replace")
    assert not r.passed and r.sentence.endswith("rtforge_hello.ko did not load: Exec format error"), r.sentence
    assert "rtforge_hello: version magic" in console and "should be" in console


# --- a Raspberry Pi OS board: its kernel's tag in the raspberrypi/linux stand-in ---
PI4 = "Raspberry Pi 4 Model B Rev 1.4"
ARM64_IMAGE_MAGIC = b"ARM\x64"   # at offset 56 of an arm64 Image (the kernel's booting.rst)


@pytest.fixture(scope="module")
def rpios_matched(rpi_git, tmp_path_factory):
    """A simulated Raspberry Pi OS 64-bit Pi 4 (linux-image-6.12.117+rpt-rpi-v8, its changelog naming
    the tag) running the smallest configuration Kbuild makes (allnoconfig with -v8): matched and
    built for the pi4-64 board from the tag rtforge fetches.  The full Raspberry Pi configuration
    is matched in tests/integration/test_kernel_match_config.py (configured only: it builds for an
    hour and more); here the kernel is compiled and packaged."""
    repo, _ = rpi_git
    work = tmp_path_factory.mktemp("rpios")
    config = kbuild_config(repo, work / "kconfig", RPI_OPTIONS)
    root = rpios("6.12.117+rpt-rpi-v8", "aarch64", PI4, "arm64", config=config,
                 changelog_lines=[f"Built from {TAG}"]).write(work / "board")
    running = read_running(LocalTransport(), str(root))
    result = build_kernel(BuildSpec(board="pi4-64", match=running, match_host="local", dist=work / "dist",
                                    debs=False))
    return result, config


def test_a_raspberry_pi_os_board_gets_its_own_kernel_with_rt_only(rpios_matched, rpi_git):
    result, config = rpios_matched
    _, commit = rpi_git
    plan = result.match
    assert plan.spec == f"rpi:{TAG}" and plan.exact and not plan.instead, plan.instead
    bundle = open_bundle(result.dist)
    bundle.verify()
    assert commit in bundle.manifest["source_id"], bundle.manifest["source_id"]
    # a kernel was built: the bundle's image is an arm64 Image
    image = next(p for p in (bundle.root / "boot").iterdir() if p.suffix == ".img")
    assert image.read_bytes()[56:60] == ARM64_IMAGE_MAGIC, image
    built = read_config(bundle.member(f"config-{result.release}"))
    before = parse_config(config)    # what Kbuild wrote for the board, not what rtforge read of it
    differ = differing(before, built)
    reported = {d["symbol"]: d for d in bundle.manifest["match"]["differences"]}
    assert differ == set(reported), (differ ^ set(reported))
    assert built["PREEMPT_RT"] == "y" and built["LOCALVERSION"] == '"-v8"' == before["LOCALVERSION"]
    assert not [d for d in reported.values() if d["kind"] == "kconfig"], "every difference has a cause"
    assert result.release.startswith("6.12.117-v8"), result.release
