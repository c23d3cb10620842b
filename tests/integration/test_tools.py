"""What rtforge runs, which package provides it, and `make setup` installing
all of it: a kernel build that would fail at its end for want of a tool
must refuse before it starts, naming the Debian package."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rtforge import tools
from rtforge.errors import UserError
from rtforge.kernel.boards import get_board
from rtforge.kernel.build import BuildSpec, tools_before, tools_for_config

REPO = Path(__file__).resolve().parents[2]


def setup_packages() -> set[str]:
    out = subprocess.run(["make", "-s", "-C", str(REPO), "print-debs"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def essential(package: str) -> bool:
    """Essential packages are on every Debian system (dpkg-query's own answer)."""
    p = subprocess.run(["dpkg-query", "-W", "-f=${Essential}", package], capture_output=True, text=True)
    return p.stdout.strip() == "yes"


def test_make_setup_installs_the_package_of_every_tool_rtforge_runs():
    listed = setup_packages()
    missing = sorted(
        {pkg for pkg in tools.known(with_board=False).values() if pkg not in listed and not essential(pkg)}
    )
    assert missing == []


def owner(path: str) -> str | None:
    """The package dpkg says ships path (trying the /usr-merged twin too)."""
    twins = [path, path.replace("/usr/", "/", 1) if path.startswith("/usr/") else "/usr" + path]
    for p in twins + [os.path.realpath(path)]:  # an alternatives link is owned by its target
        out = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.split(":", 1)[0].split(",")[0].strip()
    return None


@pytest.mark.parametrize("name", sorted(tools.known()))
def test_each_tool_comes_from_the_package_named_for_it(name):
    path = (
        name
        if name.startswith("/")
        else shutil.which(name, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    )
    if path is None or not os.path.exists(path):
        whose = "a board's, not this machine's" if tools.board_only(name) else "make setup installs it"
        pytest.skip(f"{name} is not installed here ({tools.package_of(name)}: {whose})")
    got = owner(path)
    assert got is not None, f"dpkg knows no package for {path}"
    assert got.split(":")[0] == tools.package_of(name), f"{path} comes from {got}"


def test_require_names_every_missing_tool_and_its_package_in_one_sentence():
    with pytest.raises(UserError) as e:
        tools.require(
            ["make", "dh_listpackages", "/usr/include/gelf.h"],
            "this kernel build",
            which=lambda n: None if n == "dh_listpackages" else "/usr/bin/" + n,
            exists=lambda p: False,
        )
    msg = str(e.value)
    assert "dh_listpackages (debhelper)" in msg and "/usr/include/gelf.h (libelf-dev)" in msg
    assert "make (" not in msg
    assert msg.endswith("`apt-get install debhelper libelf-dev`") and "\n" not in msg
    tools.require(["make"], "x", which=lambda n: "/usr/bin/make")  # nothing missing: no error


def test_debs_need_the_packaging_tools_and_a_plain_build_does_not():
    board = get_board("qemu-virt-arm64")
    with_debs = tools_before(board, BuildSpec(board="qemu-virt-arm64", source="debian:6.12"))
    without = tools_before(board, BuildSpec(board="qemu-virt-arm64", source="debian:6.12", debs=False))
    assert {"dpkg-buildpackage", "dh_listpackages", "rsync"} <= set(with_debs)
    assert not {"dpkg-buildpackage", "dh_listpackages"} & set(without)
    assert "aarch64-linux-gnu-gcc" in without and "apt-get" in without
    assert "arm-linux-gnueabihf-gcc" in tools_before(get_board("pi1"), BuildSpec(board="pi1", source="tar:x.tar.xz"))


def test_a_tarball_source_needs_its_decompressor_wherever_it_is_named():
    board = get_board("pi1")
    assert "zstd" in tools_before(board, BuildSpec(board="pi1", source="tar:linux-6.12.tar.zst"))
    # a board file's default source, with no --source given, is read the same way
    tar_board = dataclasses.replace(board, default_source="tar:linux-6.12.tar.zst")
    assert "zstd" in tools_before(tar_board, BuildSpec(board="pi1"))


def test_config_dependent_tools():
    assert tools_for_config({"MODULES": "y", "MODULE_SIG": "y", "KERNEL_XZ": "y"}, get_board("pi1")) == [
        "/usr/include/openssl/opensslv.h",
        "depmod",
        "xz",
    ]
    assert tools_for_config({"DEBUG_INFO_BTF": "y"}, get_board("pi1")) == ["/usr/include/gelf.h", "pahole"]
    assert tools_for_config({"MODULES": "n"}, get_board("pi1")) == []


def _build_depends(mkdebian: Path) -> set[str]:
    """Package names in the Build-Depends fields mkdebian writes into debian/control."""
    text = mkdebian.read_text()
    fields = re.findall(r"^Build-Depends(?:-Arch)?:(.*?)(?=^\S|\Z)", text, re.M | re.S)
    names = set()
    for field in fields:
        for dep in field.split(","):
            name = re.split(r"[\s(:<\[]", dep.strip(), maxsplit=1)[0]
            if name:
                names.add(name)
    return names


def test_packaging_needs_cover_the_trees_own_build_depends(src612):
    """The kernel's scripts/package/mkdebian states what bindeb-pkg needs;
    rtforge's check must ask for at least that (the cross gcc comes from
    the board)."""
    deps = _build_depends(src612.path / "scripts/package/mkdebian")
    assert {"bc", "bison", "flex", "kmod", "rsync"} <= deps  # the parser read the real field
    deps = {"debhelper" if d == "debhelper-compat" else d for d in deps if not d.startswith("gcc-$")}
    board = get_board("qemu-virt-arm64")
    asked = {tools.package_of(n) for n in tools_before(board, BuildSpec(board=board.name, source="debian:6.12"))}
    assert deps - asked == set()


def _path_without(tmp_path: Path, hidden: set[str]) -> str:
    """A PATH with every program of the real PATH but the hidden ones."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep) + ["/usr/sbin", "/sbin"]:
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            link = bin_dir / name
            if name not in hidden and not link.exists():
                link.symlink_to(os.path.join(d, name))
    return str(bin_dir)


def test_a_kernel_build_without_debhelper_refuses_before_anything(tmp_path):
    if shutil.which("dh_listpackages") is None:
        pytest.skip("debhelper is not installed here (make setup installs it)")
    env = {
        **os.environ,
        "PATH": _path_without(tmp_path, {"dh_listpackages"}),
        "RTFORGE_CACHE_DIR": str(tmp_path / "cache"),
    }
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtforge",
            "kernel",
            "build",
            "--board",
            "qemu-virt-arm64",
            "--source",
            "debian:6.12",
            "--dist",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "dh_listpackages (debhelper)" in lines[0] and "apt-get install debhelper" in lines[0]
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "dist").exists()
    assert not (tmp_path / "cache" / "kernel").exists()  # nothing fetched, extracted or built


def test_setup_without_root_names_what_it_would_install():
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    # pytest's own tmp dirs are 0700: nobody could not reach the script there
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        script = Path(d) / "ensure-debs"
        shutil.copy(REPO / "scripts/ensure-debs", script)
        script.chmod(0o755)
        p = subprocess.run(
            [
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                str(script),
                "coreutils",
                "rtforge-no-such-package",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert p.returncode == 2
    assert "rtforge-no-such-package" in p.stderr and "coreutils" not in p.stderr.split("\n")[0].replace(
        "missing Debian packages:", ""
    )
    assert "sudo apt-get install rtforge-no-such-package" in p.stderr


def test_a_board_missing_a_tool_is_refused_before_anything_changes(tmp_path):
    """One round trip names every missing tool and its package."""
    from rtforge.device import LocalTransport

    if shutil.which("grub-reboot") or os.path.exists("/usr/include/gelf.h") is False:
        pytest.skip("needs a machine with libelf-dev's gelf.h and without GRUB (make setup's)")
    t = LocalTransport()
    with pytest.raises(UserError) as e:
        tools.require_on(t, ["sh", "grub-reboot", "/usr/include/gelf.h", "grub-set-default"], "this deploy")
    msg = str(e.value)
    assert msg == (
        "this deploy needs grub-reboot (grub2-common), grub-set-default (grub2-common), missing on "
        "this machine: install with `apt-get install grub2-common`"
    )
    tools.require_on(t, ["sh", "cat"], "this deploy")  # all there: nothing raised
