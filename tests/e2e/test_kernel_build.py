"""A real PREEMPT_RT kernel: Debian's 6.12 source, the qemu-virt-arm64 board,
Kbuild, packages, and a boot test in QEMU.

The kernel is the session's arm64 test kernel (tests/support/testkernels.py,
the conftest fixture arm64_kernel), shared with the --match tests of
test_kernel_match_build.py: allnoconfig plus the virt fragment, with the Pi
5's 16K pages (issue 25 item 3: booted on QEMU virt with the Cortex-A76, the
Pi 5's core, which has the 16K granule; /init prints the page size user
space gets, and the boot test holds it to the bundle's .config) and
loadable modules.  A cold build takes minutes; a warm run starts from the
kept build tree and Kbuild compiles nothing.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device.deploy.bundle import open_bundle
from rtforge.kernel.boottest import expected_page_size
from rtforge.kernel.build import build_kernel
from rtforge.kernel.kconfig import read_config
from rtforge.report.verdict import report_warnings
from rtforge.results.store.runstore import Store

from ..support.testkernels import ARM64_OPTIONS, spec_of

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.kernel]
BOARD, SOURCE = "qemu-virt-arm64", "debian:6.12"


@pytest.fixture
def built(arm64_kernel):
    return arm64_kernel


def test_build_packages_a_verified_rt_kernel(built):
    dist = built.dist
    assert dist.name == f"{built.release}-{BOARD}" and built.release.endswith("-rt-rtforge")
    bundle = open_bundle(dist)
    bundle.verify()
    m = bundle.manifest
    assert (m["board"], m["arch"], m["machines"], m["image"]) == (BOARD, "arm64", ["aarch64"], "Image-rtforge")
    assert m["kernelrelease"] == built.release and m["uname_v_marker"] == "PREEMPT_RT"
    assert m["source_id"].startswith("debian:linux-source-6.12=") and m["rt_patch_id"] is None
    assert m["reproducer"] == "rtforge kernel build --board qemu-virt-arm64 --source debian:6.12 " + \
        " ".join(f"-K {o}" for o in ARM64_OPTIONS)
    assert [q["machine"] for q in m["emulated"]] == ["virt"] and m["user_cpus"] == ["cortex-a72"]
    # the .config on disk, read back independently, has what the manifest claims
    config = read_config(next(bundle.root.glob("config-*")))
    assert config["PREEMPT_RT"] == "y" and config["EXPERT"] == "y" and config["HZ_1000"] == "y"
    assert m["config_sha256"] == bundle.files[f"config-{built.release}"]
    image = (bundle.root / "boot/Image-rtforge").read_bytes()
    assert image[0x38:0x3C] == b"ARM\x64"  # an arm64 Image
    with tarfile.open(dist / f"{built.release}-{BOARD}.tar.gz") as tar:
        assert {"manifest.json", "boot/Image-rtforge"} <= set(tar.getnames())
    debs = sorted(p.name for p in dist.glob("*.deb"))
    assert any(d.startswith(f"linux-image-{built.release}_") for d in debs), debs
    # the .deb carries the very image of the bundle (gzipped, as Debian ships arm64 kernels)
    deb = next(dist.glob(f"linux-image-{built.release}_*.deb"))
    out = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        vmlinuz = tar.extractfile(f"./boot/vmlinuz-{built.release}").read()
    assert gzip.decompress(vmlinuz) == image
    assert config["ARM64_16K_PAGES"] == "y" and config["PAGE_SHIFT"] == "14"     # the Pi 5's page size
    assert [(q["machine"], q["cpu"]) for q in m["emulated"]] == [("virt", "cortex-a76")]
    # the headers package, for DKMS, with build programs for the board (Debian's 6.12 rebuilds them)
    headers = m["headers"]
    assert headers["deb"] and headers["rule"] == "target" and any(d.startswith("linux-headers-") for d in debs)


def test_kbuilds_profile_packages_the_image_without_the_headers(built, tmp_path):
    """What a build does when the headers package cannot be made here (a
    signed-modules kernel without the board's libcrypto: the rule is
    tests/integration/test_kernel_headers.py's): bindeb-pkg with Kbuild's
    own build profile packages the image and leaves the headers out."""
    from rtforge.kernel.package import _bindeb_pkg
    from rtforge.kernel.sources import prepare_source

    build = built.config_path.parent
    lv = "-rt-rtforge"
    debs = _bindeb_pkg(prepare_source(SOURCE).path, build, built.board, [f"LOCALVERSION={lv}"], built.release,
                       tmp_path / "bindeb.log", os.cpu_count() or 1, headers=False)
    names = [d.name for d in debs]
    for d in debs:
        d.unlink()
    assert any(n.startswith(f"linux-image-{built.release}_") for n in names), names
    assert not any(n.startswith("linux-headers-") for n in names), names


def test_boot_test_in_qemu_proves_preempt_rt(built, tmp_path, capsys):
    rd = tmp_path / "results"
    assert main(["kernel", "boot-test", str(built.dist), "--results-dir", str(rd), "--probe-s", "2"]) == 0
    out = capsys.readouterr().out
    assert f"passed: virt: {built.release} booted on QEMU virt" in out and "uname -v has PREEMPT_RT" in out
    # the Pi 5's page size, as the guest's user space got it (the boot test holds it to the .config)
    assert ", 16K pages" in out and expected_page_size(open_bundle(built.dist)) == 16384
    [log] = re.findall(r"console log: (\S+)", out)
    assert "RTFORGE-PAGESIZE 16384" in Path(log).read_text(errors="replace")
    assert "/sys/kernel/realtime absent, as on mainline" in out
    store = Store(rd)
    run = store.load(store.resolve("last"))
    assert run.config["emulated"] is True and "emulated" in run.label
    assert run.system["kernel_release"] == built.release and run.system["preempt_model"] == "rt"
    assert run.system["machine"] == "aarch64" and all(c.count > 100 for c in run.cpus)
    assert any("emulation noise" in w for w in report_warnings(run))


def test_unchanged_rebuild_does_no_work(built, tmp_path):
    spec = spec_of("arm64", tmp_path)
    spec.debs = False
    again = build_kernel(spec)
    assert again.objects == 0 and again.release == built.release


def test_dropped_option_names_its_unmet_dependency(tmp_path, capsys):
    """PREEMPT_RT without EXPERT: the classic silent drop, caught."""
    rc = main(
        ["kernel", "build", "--board", BOARD, "--source", SOURCE, "-K", "CONFIG_EXPERT=n", "--dist", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert rc == 2, err
    assert (
        "Kconfig dropped 1 requested option: CONFIG_PREEMPT_RT=y became n "
        "(depends on EXPERT && ARCH_SUPPORTS_RT: EXPERT is n)"
        in err
    )
    assert not any(tmp_path.iterdir())
    rc = main(
        ["kernel", "build", "--board", BOARD, "--source", SOURCE, "-K", "CONFIG_PCI_MSI=y", "--dist", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "CONFIG_PCI_MSI=y became n (inside `if PCI` (drivers/pci/Kconfig): PCI is n)" in err


def test_bundle_verify_catches_tampering(built, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built.dist / "bundle", copy)
    assert main(["kernel", "verify", str(copy)]) == 0
    (copy / "boot/Image-rtforge").write_bytes(b"not a kernel")
    assert main(["kernel", "verify", str(copy)]) == 2
    assert "boot/Image-rtforge does not match its sha256" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--board", "pi9"], "unknown board"),
        (["--board", BOARD, "--fragments", "speed"], "unknown fragment 'speed'"),
        (["--board", BOARD, "-K", "CONFIG_X=maybe"], "has a value Kconfig cannot take"),
        (["--board", BOARD, "-k", "/no/such.config"], "-k /no/such.config: no such fragment file"),
        (["--board", BOARD, "--defconfig", "-j9"], "--defconfig '-j9' is not a defconfig name"),
        (["--board", BOARD, "--defconfig", "allnoconfig", "--match", "local"],
         "--defconfig and --match both choose what the configuration starts from"),
        (["--board", BOARD, "--defconfig", "no_such_defconfig"],
         "--defconfig no_such_defconfig: the source tree has no arch/arm64/configs/no_such_defconfig"),
    ],
)
def test_bad_build_input(argv, message, tmp_path, capsys):
    assert main(["kernel", "build", *argv, "--dist", str(tmp_path), "--source", SOURCE]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_manifest_json_is_what_deploy_reads(built):
    m = json.loads((built.dist / "bundle" / "manifest.json").read_text())
    assert set(m) >= {"board", "arch", "machines", "models", "kernelrelease", "image", "uname_v_marker", "files"}


def test_a_rerun_with_other_options_really_reconfigures(tmp_path, monkeypatch):
    """Unlike tools that skip configuration when .config exists.  The new
    option comes from a -k fragment named by a relative path, as a user
    types it (merge_config.sh runs in the tree, not where the user is)."""
    from rtforge.kernel.boards import get_board
    from rtforge.kernel.kbuild import configure
    from rtforge.kernel.rtpatch import detect_rt
    from rtforge.kernel.sources import prepare_source

    board = get_board(BOARD)
    src = prepare_source(SOURCE)
    rt = detect_rt(src.path, board.arch)
    build = tmp_path / "obj"
    first = configure(src.path, build, board, src.flavour, rt, fragments=["latency"], user_fragments=[], options=[])
    assert read_config(build / ".config").get("PRINTK_TIME", "n") == "n" and first.config["PREEMPT_RT"] == "y"
    stamp = (build / ".config").stat().st_mtime_ns
    configure(src.path, build, board, src.flavour, rt, fragments=["latency"], user_fragments=[], options=[])
    assert (build / ".config").stat().st_mtime_ns == stamp  # the same result leaves .config alone
    monkeypatch.chdir(tmp_path)
    Path("mine.config").write_text("CONFIG_PRINTK_TIME=y\n")
    configure(src.path, build, board, src.flavour, rt, fragments=["latency"], user_fragments=[Path("mine.config")],
              options=[])
    assert read_config(build / ".config")["PRINTK_TIME"] == "y"


@pytest.mark.parametrize(
    "src_file, obj_file, config_lv",
    [
        (None, None, ""),  # mainline PREEMPT_RT: nothing says rt
        ("-rt30", None, ""),  # an RT patch's localversion-rt
        (None, "-rt7", ""),  # a localversion file in the build dir
        (None, None, "-v8-rt"),  # CONFIG_LOCALVERSION
        ("-custom", None, "-v8"),  # release suffixes without rt
    ],
)
def test_localversion_agrees_with_setlocalversion(tmp_path, src_file, obj_file, config_lv):
    """rtforge decides whether to add -rt before the build, from the files
    and option that the kernel's scripts/setlocalversion reads; that script
    (run for real, on a synced auto.conf) is the judge."""
    from rtforge.kernel.build import _localversion
    from rtforge.kernel.sources import prepare_source

    real = prepare_source(SOURCE).path
    src, obj = tmp_path / "src", tmp_path / "obj"
    (obj / "include" / "config").mkdir(parents=True)
    src.mkdir()
    if src_file:
        (src / "localversion-rt").write_text(src_file + "\n")
    if obj_file:
        (obj / "localversion").write_text(obj_file + "\n")
    config = {"LOCALVERSION": f'"{config_lv}"'}
    (obj / "include" / "config" / "auto.conf").write_text(f'CONFIG_LOCALVERSION="{config_lv}"\n')
    out = subprocess.run(
        ["sh", str(real / "scripts" / "setlocalversion"), str(src)],
        cwd=obj,
        text=True,
        capture_output=True,
        env={"KERNELVERSION": "6.12.0", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    release = out.stdout.strip()
    assert release.startswith("6.12.0")
    assert _localversion(src, obj, config) == ("-rtforge" if "-rt" in release else "-rt-rtforge"), release
