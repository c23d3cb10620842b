"""`kernel build --match HOST`, the parts that build nothing: reading a
board's running kernel (copies of Raspberry Pi OS and Debian boards, this
machine, the same copy over the loopback sshd), choosing its source, and
fetching that source from a local git repository with raspberrypi/linux's
layout (rpi-X.Y.y branches, raspberrypi-kernel_1.* and stable_* tags), whose
commits and versions the test knows from git itself."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.device import LocalTransport
from rtforge.errors import UserError
from rtforge.kernel.boards import get_board
from rtforge.kernel.match import check_board, check_tree, fixups, plan_source, suggest_boards
from rtforge.kernel.running import changelog_refs, newest_entry, read_running
from rtforge.kernel.sources import ENV_RPI_GIT_URL, parse_source_spec, prepare_source

from ..support.kernelsrc import NONCE, git, subset_tree
from ..support.runningboards import BoardTree, changelog, debian, legacy_rpios, rpios

pytestmark = pytest.mark.usefixtures("kernel_cache_cleanup")

PI4, PI5 = "Raspberry Pi 4 Model B Rev 1.4", "Raspberry Pi 5 Model B Rev 1.0"


def dpkg_version(pkg: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True).stdout


def read(tree: BoardTree, tmp_path: Path, name: str = "board"):
    return read_running(LocalTransport(), str(tree.write(tmp_path / name)))


# ---------------------------------------------------------------- reading a board

def test_raspberry_pi_os_64_bit_pi_4(tmp_path):
    k = read(rpios("6.12.25+rpt-rpi-v8", "aarch64", PI4, "arm64", config="CONFIG_ARM64=y\nCONFIG_HZ_250=y\n"),
             tmp_path)
    assert (k.release, k.machine, k.model) == ("6.12.25+rpt-rpi-v8", "aarch64", PI4)
    assert (k.package, k.package_version, k.source_package) == ("linux-image-6.12.25+rpt-rpi-v8", "1:6.12.25-1+rpt1",
                                                                 "linux")
    assert k.config_from == "/proc/config.gz" and k.config == {"ARM64": "y", "HZ_250": "y"}
    assert k.os_name == "Debian GNU/Linux 12 (bookworm)" and k.uname_v.startswith("#1 SMP PREEMPT Debian 1:6.12.25")
    assert suggest_boards(k) == ["pi4-64"]
    plan = plan_source(k, get_board("pi4-64"))
    assert plan.spec == "rpi:rpi-6.12.y" and not plan.exact and plan.origin == "raspberrypi"
    assert plan.instead == ["linux-image-6.12.25+rpt-rpi-v8 1:6.12.25-1+rpt1 names no raspberrypi/linux commit or "
                            "tag in its changelog: built from the head of the branch rpi-6.12.y"]


def test_raspberry_pi_os_32_bit_pi_4_config_in_boot(tmp_path):
    k = read(rpios("6.12.47+rpt-rpi-v7l", "armv7l", PI4, "armhf", config_at="boot"), tmp_path)
    assert k.config_from == "/boot/config-6.12.47+rpt-rpi-v7l" and k.machine == "armv7l"
    assert k.uname_v.startswith("#1 SMP Raspbian 1:6.12.47-1+rpt1~bookworm")
    assert suggest_boards(k) == ["pi4-32"]
    check_board(k, get_board("pi4-32"))
    with pytest.raises(UserError, match=r"runs 6.12.47\+rpt-rpi-v7l, an armv7l kernel, and board pi4-64 builds "
                                        r"aarch64 kernels: use --board pi4-32"):
        check_board(k, get_board("pi4-64"))


def test_pi_5_changelog_naming_a_commit_is_an_exact_match(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    k = read(rpios("6.12.25+rpt-rpi-2712", "aarch64", PI5, "arm64",
                   changelog_lines=[f"Update to raspberrypi/linux {commit}"]), tmp_path)
    assert [(r.kind, r.value) for r in k.refs] == [("commit", commit)]
    plan = plan_source(k, get_board("pi5"))
    assert plan.spec == f"rpi:{commit}" and plan.exact and not plan.instead
    with pytest.raises(UserError, match="is a Raspberry Pi 5 Model B Rev 1.0, which board pi4-64 does not build "
                                        "for .*: use --board pi5"):
        check_board(k, get_board("pi4-64"))


def test_legacy_raspberrypi_kernel_is_its_tag(tmp_path):
    k = read(legacy_rpios("6.1.21-v8+", "aarch64", PI4, "1:1.20230405-1"), tmp_path)
    assert (k.package, k.package_version) == ("raspberrypi-kernel", "1:1.20230405-1")
    plan = plan_source(k, get_board("pi4-64"))
    assert plan.spec == "rpi:raspberrypi-kernel_1.20230405-1" and plan.exact


def test_debian_on_a_pi(tmp_path):
    installed = dpkg_version("linux-source-6.12")
    k = read(debian("6.12.117+deb12-arm64", installed), tmp_path)
    assert k.package == "linux-image-6.12.117+deb12-arm64" and k.package_version == installed
    assert k.source_package == "linux-signed-arm64" and k.config_from == "/boot/config-6.12.117+deb12-arm64"
    assert "pi4-64" in suggest_boards(k)
    plan = plan_source(k, get_board("pi4-64"))
    assert plan.spec == f"debian:6.12={installed}" and plan.exact and plan.origin == "debian"
    src = prepare_source(plan.spec)            # the installed linux-source-6.12: no network
    assert src.source_id == f"debian:linux-source-6.12={installed}"
    check_tree(plan, k, src)
    assert plan.exact == (str(src.version) == "6.12.117"), plan.instead


def test_no_package_no_config_says_what_is_used_instead(tmp_path):
    k = read(BoardTree("6.6.30-custom", "#3 SMP PREEMPT Sat Jun  1 10:00:00 UTC 2024", "aarch64", PI4,
                       config=None), tmp_path)
    assert k.package is None and k.config is None and k.config_from is None
    plan = plan_source(k, get_board("pi4-64"))
    assert plan.spec == "rpi" and plan.origin == "unknown" and not plan.exact
    assert plan.instead == ["6.6.30-custom comes from no package (no dpkg database, or none owns it), which rtforge "
                            "cannot trace to a source: built from board pi4-64's default source rpi"]


def test_the_running_config_is_matched_against_an_empty_file_as_no_config(tmp_path):
    k = read(rpios("6.12.25+rpt-rpi-v8", "aarch64", PI4, "arm64", config="# not a kernel configuration\n"),
             tmp_path)
    assert k.config is None and k.config_from is None


def test_this_machine(tmp_path):
    """--match local: compared with what Python and /proc say directly."""
    k = read_running(LocalTransport())
    assert k.release == os.uname().release and k.machine == os.uname().machine
    assert k.uname_v == os.uname().version
    if Path("/proc/config.gz").exists():
        assert k.config_from == "/proc/config.gz" and k.config
    elif Path(f"/boot/config-{k.release}").exists():
        assert k.config_from == f"/boot/config-{k.release}"


@pytest.mark.parametrize("release", ["6.1/../../etc", "../x", "6.1 rm -rf", ".hidden"])
def test_a_release_that_is_not_a_name_is_refused(tmp_path, release):
    tree = BoardTree(release, "#1 SMP", "aarch64")
    with pytest.raises(UserError, match="reports a kernel release rtforge cannot use as a name"):
        read(tree, tmp_path)


def test_board_answers_are_bounded(tmp_path):
    """A board's files are read with a bound (architecture rule 12)."""
    huge = "CONFIG_X=y\n" + "# padding\n" * 600_000      # 6 MB
    k = read(rpios("6.12.25+rpt-rpi-v8", "aarch64", PI4, "arm64", config=huge), tmp_path)
    assert len(k.config_text) <= 4 << 20 and k.config == {"X": "y"}


def test_changelog_shapes():
    head = newest_entry(changelog("linux", "1:6.12.25-1+rpt1", [
        "Built from rpi-6.12.y at commit 89abcdef0", "See stable_20250428 and raspberrypi-kernel_1.20230405-1",
        "Full hash 89abcdef0123456789abcdef0123456789abcdef"], older=["Older: " + "f" * 40]))
    refs = [(r.kind, r.value) for r in changelog_refs(head)]
    assert refs == [("commit", "89abcdef0123456789abcdef0123456789abcdef"), ("tag", "stable_20250428"),
                    ("tag", "raspberrypi-kernel_1.20230405-1"), ("branch", "rpi-6.12.y"),
                    ("short-commit", "89abcdef0")]
    assert "f" * 40 not in head                    # only the newest entry is read


def test_debian_exact_version_specs():
    s = parse_source_spec("debian:6.12=6.12.117-1~deb12u1")
    assert (s.kind, s.location, s.ref, s.text) == ("debian", "6.12", "6.12.117-1~deb12u1",
                                                   "debian:6.12=6.12.117-1~deb12u1")
    for bad in ("debian:latest=1.0", "debian:6.12=", "debian:6.12=;rm"):
        with pytest.raises(UserError, match="debian:X.Y=VERSION"):
            parse_source_spec(bad)


def test_fixups_name_only_files_the_tree_lacks(tmp_path):
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "mine.pem").write_text("x")
    config = {"SYSTEM_TRUSTED_KEYS": '"debian/certs/debian-uefi-certs.pem"', "SYSTEM_REVOCATION_KEYS": '""',
              "MODULE_SIG_KEY": '"certs/mine.pem"', "INITRAMFS_SOURCE": '"/nonexistent/initramfs"'}
    assert fixups(config, tmp_path) == {
        "SYSTEM_TRUSTED_KEYS": ('""', "the running kernel's debian/certs/debian-uefi-certs.pem is a file of the "
                                      "tree it was built in"),
        "INITRAMFS_SOURCE": ('""', "the running kernel's /nonexistent/initramfs would be this machine's file, "
                                   "which rtforge never builds into a kernel from a board's configuration (give it "
                                   "with -K CONFIG_INITRAMFS_SOURCE=... to build it in)")}


# ---------------------------------------------------------------- the source, from a raspberrypi/linux layout

def _sublevel(tree: Path, version: str) -> None:
    v, p, s = version.split(".")
    text = (tree / "Makefile").read_text()
    import re
    for key, value in (("VERSION", v), ("PATCHLEVEL", p), ("SUBLEVEL", s)):
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.M)
    (tree / "Makefile").write_text(text)


@pytest.fixture
def rpi_repo(src612, tmp_path, monkeypatch):
    """raspberrypi/linux's layout: rpi-6.1.y (6.1.21 tagged raspberrypi-kernel_1.20230405-1, then 6.1.77) and
    rpi-6.12.y (6.12.25 tagged stable_20250428, then 6.12.34: the default branch)."""
    work = subset_tree(src612, tmp_path / "work", {"nonce": NONCE + "\n"})
    shutil.copy(work / "arch/arm64/configs/defconfig", work / "arch/arm64/configs/bcm2711_defconfig")
    git("init", "-q", "-b", "rpi-6.1.y", cwd=work)
    commits = {}
    for branch, steps in (("rpi-6.1.y", [("6.1.21", "raspberrypi-kernel_1.20230405-1"), ("6.1.77", None)]),
                          ("rpi-6.12.y", [("6.12.25", "stable_20250428"), ("6.12.34", None)])):
        if branch != "rpi-6.1.y":
            git("checkout", "-q", "-b", branch, cwd=work)
        for version, tag in steps:
            _sublevel(work, version)
            git("add", "-A", cwd=work)
            git("commit", "-qm", f"Linux {version}", cwd=work)
            commits[version] = git("rev-parse", "HEAD", cwd=work)
            if tag:
                git("tag", "-a", tag, "-m", tag, cwd=work)
    bare = tmp_path / "linux.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    git("symbolic-ref", "HEAD", "refs/heads/rpi-6.12.y", cwd=bare)
    monkeypatch.setenv(ENV_RPI_GIT_URL, f"file://{bare}")
    return commits


def test_branch_head_moved_on_is_said(rpi_repo, tmp_path):
    k = read(rpios("6.12.25+rpt-rpi-v8", "aarch64", PI4, "arm64"), tmp_path)
    plan = plan_source(k, get_board("pi4-64"))
    src = prepare_source(plan.spec)
    assert rpi_repo["6.12.34"] in src.source_id and str(src.version) == "6.12.34"
    check_tree(plan, k, src)
    assert not plan.exact and plan.instead[-1] == (f"{k.host} runs 6.12.25, and rpi:rpi-6.12.y is 6.12.34: the kernel "
                                                   "is built from 6.12.34")


@pytest.mark.parametrize("names", ["commit", "tag", "short"])
def test_the_changelog_picks_the_commit(rpi_repo, tmp_path, names):
    commit = rpi_repo["6.12.25"]
    line = {"commit": f"Built from {commit}", "tag": "Built from stable_20250428",
            "short": f"Built from commit {commit[:12]}"}[names]
    k = read(rpios("6.12.25+rpt-rpi-2712", "aarch64", PI5, "arm64", changelog_lines=[line]), tmp_path)
    plan = plan_source(k, get_board("pi5"))
    src = prepare_source(plan.spec)
    check_tree(plan, k, src)
    if names == "short":
        assert plan.spec == "rpi:rpi-6.12.y" and str(src.version) == "6.12.34" and not plan.exact
        assert plan.instead[0].startswith(f"the changelog names commit {commit[:12]}, too short to fetch")
    else:
        assert str(src.version) == "6.12.25" and plan.exact and not plan.instead
        assert f"@{commit}" in src.source_id       # the commit git says the tag points at


def test_legacy_tag_fetches_that_version(rpi_repo, tmp_path):
    k = read(legacy_rpios("6.1.21-v8+", "aarch64", PI4, "1:1.20230405-1"), tmp_path)
    plan = plan_source(k, get_board("pi4-64"))
    src = prepare_source(plan.spec)
    check_tree(plan, k, src)
    assert str(src.version) == "6.1.21" and f"@{rpi_repo['6.1.21']}" in src.source_id and plan.exact


# ---------------------------------------------------------------- the command line

def test_cli_refuses_the_wrong_board_before_any_work(tmp_path, capsys):
    root = rpios("6.12.25+rpt-rpi-2712", "aarch64", PI5, "arm64").write(tmp_path / "pi5")
    rc = main(["kernel", "build", "--board", "pi4-64", "--match", "local", "--sysroot", str(root),
               "--dist", str(tmp_path / "dist")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("rtforge: error: this machine (below ") and "use --board pi5" in err[-1]
    assert not (tmp_path / "dist").exists()


def test_cli_sysroot_needs_match(tmp_path, capsys):
    assert main(["kernel", "build", "--board", "pi4-64", "--sysroot", str(tmp_path)]) == 2
    assert "--sysroot reads a board's files for --match" in capsys.readouterr().err
    assert main(["kernel", "build", "--board", "pi4-64", "--match", "local", "--sysroot", str(tmp_path / "no")]) == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.root
def test_the_same_board_over_ssh(sshd, tmp_path):
    """Read over the loopback sshd, the copy gives the same facts as read here."""
    from rtforge.device import SshTransport

    tree = rpios("6.12.25+rpt-rpi-v8", "aarch64", PI4, "arm64", changelog_lines=["Built from stable_20250428"])
    root = tree.write(tmp_path / "board")
    t = SshTransport("board", ssh_config=sshd.ssh_config)
    try:
        over_ssh = read_running(t, str(root))
    finally:
        t.close()
    here = read_running(LocalTransport(), str(root))
    assert over_ssh.to_dict() | {"host": ""} == here.to_dict() | {"host": ""}
    assert over_ssh.config_text == here.config_text and over_ssh.refs[0].value == "stable_20250428"


# ---------------------------------------------------------------- the trap: a kernel that is not really RT

@pytest.mark.parametrize("config, uts, refused", [
    ("CONFIG_EXPERT=y\nCONFIG_PREEMPT_RT=y\n", "#1 SMP PREEMPT_RT Thu Nov 26", None),
    # a reused .config from a kernel without RT, which olddefconfig left so
    ("CONFIG_PREEMPT=y\n# CONFIG_PREEMPT_RT is not set\n", "#1 SMP PREEMPT Thu Nov 26",
     "the build's .config has CONFIG_PREEMPT_RT=n"),
    # the .config says RT, but what was compiled in does not: a build from another .config
    ("CONFIG_PREEMPT_RT=y\n", "#1 SMP PREEMPT Thu Nov 26",
     'the kernel was compiled with "#1 SMP PREEMPT Thu Nov 26" as uname -v'),
])
def test_what_was_built_is_read_back(tmp_path, config, uts, refused):
    from rtforge.kernel.build import check_built_rt

    (tmp_path / "include/generated").mkdir(parents=True)
    (tmp_path / ".config").write_text(config)
    (tmp_path / "include/generated/utsversion.h").write_text(f'#define UTS_VERSION "{uts}"\n')
    if refused is None:
        check_built_rt(tmp_path, "PREEMPT_RT")
        return
    with pytest.raises(UserError) as e:
        check_built_rt(tmp_path, "PREEMPT_RT")
    assert str(e.value).startswith(refused) and "not packaged" in str(e.value) and "\n" not in str(e.value)
