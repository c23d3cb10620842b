"""Kernel sources for real: Debian's linux-source packages, tarballs from a
path and over loopback HTTP, git from a local bare repository (also as the
rpi: source), and trees on disk."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rtforge import paths
from rtforge.cli import main
from rtforge.errors import UserError
from rtforge.kernel import fetch
from rtforge.kernel.rtpatch import detect_rt
from rtforge.kernel.sources import (
    ENV_RPI_GIT_URL,
    KernelVersion,
    SourceSpec,
    parse_source_spec,
    prepare_source,
    read_kernel_version,
)

from ..support.kernelsrc import NONCE, SUBSET, git, make_tarball, serve, subset_tree

pytestmark = pytest.mark.usefixtures("kernel_cache_cleanup")


def dpkg_version(pkg: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True).stdout


@pytest.mark.parametrize("text,expected", [
    ("rpi", SourceSpec("rpi", "", None)),
    ("rpi:rpi-6.6.y", SourceSpec("rpi", "", "rpi-6.6.y")),
    ("debian", SourceSpec("debian", "")),
    ("debian:6.12", SourceSpec("debian", "6.12")),
    ("git:https://example.org/linux.git@v6.12", SourceSpec("git", "https://example.org/linux.git", "v6.12")),
    ("git:https://example.org/linux.git", SourceSpec("git", "https://example.org/linux.git", None)),
    ("git:git@example.org:k/linux.git", SourceSpec("git", "git@example.org:k/linux.git", None)),
    ("git:git@example.org:k/linux.git@main", SourceSpec("git", "git@example.org:k/linux.git", "main")),
    ("git:https://me@example.org/linux.git", SourceSpec("git", "https://me@example.org/linux.git", None)),
    ("tar:https://example.org/linux-6.6.30.tar.xz", SourceSpec("tar", "https://example.org/linux-6.6.30.tar.xz")),
    ("tar:/tmp/linux.tar.gz", SourceSpec("tar", "/tmp/linux.tar.gz")),
    ("dir:/usr/src/linux", SourceSpec("dir", "/usr/src/linux")),
])
def test_spec_parsing(text, expected):
    assert parse_source_spec(text) == expected


@pytest.mark.parametrize("text,words", [
    ("svn:foo", "unknown kernel source"), ("", "unknown kernel source"), ("debian:twelve", "debian:X.Y"),
    ("git:", "needs a location"), ("tar:", "needs a location"), ("dir:", "needs a location"),
])
def test_bad_specs_are_one_sentence(text, words):
    with pytest.raises(UserError, match=words) as e:
        parse_source_spec(text)
    assert "\n" not in str(e.value)


def test_bad_spec_hint_for_a_bare_path(tmp_path):
    with pytest.raises(UserError, match=f"did you mean dir:{tmp_path}"):
        parse_source_spec(str(tmp_path))


def test_debian_6_12_is_extracted_once_and_identified(src612):
    assert src612.source_id == f"debian:linux-source-6.12={dpkg_version('linux-source-6.12')}"
    assert src612.version.series == "6.12" and src612.version >= KernelVersion(6, 12, 0)
    assert src612.flavour == "mainline" and src612.kind == "debian" and not src612.in_place
    assert src612.path.is_relative_to(fetch.kernel_cache() / "src")
    assert (src612.path / "arch/arm64/configs/defconfig").is_file()
    before = src612.path.stat()
    again = prepare_source("debian:6.12")
    after = again.path.stat()
    assert again.path == src612.path                                   # reused, not extracted again:
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # the same folder


def test_debian_without_version_is_the_newest_installed(src612):
    installed = sorted((p.name for p in Path("/usr/src").glob("linux-source-*.tar.xz")),
                       key=lambda n: tuple(int(x) for x in n[13:-7].split(".")))
    newest = prepare_source("debian")
    assert newest.spec == "debian:" + installed[-1][13:-7]


@pytest.mark.slow
def test_debian_series_no_suite_offers_is_refused_without_root_and_without_touching_apt():
    """rtforge's apt is private: it needs no root and leaves the system's apt alone."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root to drop to another user")
    home = Path(tempfile.mkdtemp(prefix="rtforge-nobody-"))     # pytest's tmp_path is root-only
    os.chmod(home, 0o777)
    env = {**os.environ, "RTFORGE_CACHE_DIR": str(home / "cache"), "HOME": str(home), "MPLCONFIGDIR": str(home),
           "RTFORGE_DOWNLOAD_CACHE": str(home / "downloads")}
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable]
    before = system_apt_state()
    try:
        if subprocess.run([*nobody, "-c", "import rtforge"], env=env, capture_output=True).returncode:
            pytest.skip("this checkout is not readable by nobody (cloned under a root-only folder?)")
        p = subprocess.run([*nobody, "-m", "rtforge", "kernel", "source", "debian:5.10"],
                           capture_output=True, text=True, env=env, timeout=300)
        offered = offered_series(home / "cache" / "kernel" / "apt" / "lists")
    finally:
        shutil.rmtree(home)
    assert p.returncode == 2, p.stderr
    assert offered and "5.10" not in offered          # bullseye is not among the suites searched
    *progress, last = p.stderr.strip().splitlines()
    assert last == (
        f"rtforge: error: no Debian suite offers linux-source-5.10 (offered: {', '.join(offered)}): "
        "use debian:X.Y with one of those, or debian:latest"
    )
    # before it, only progress lines (stderr is not a terminal here: plain lines, no bar)
    assert all(re.search(r" \([0-9]+ s\)$", line) for line in progress), progress
    assert system_apt_state() == before


def system_apt_state() -> dict[str, tuple]:
    """Every file of the system's apt configuration, lists and package status."""
    state = {}
    for root in ("/etc/apt", "/var/lib/apt/lists", "/var/lib/dpkg/status", "/var/cache/apt/archives"):
        for p in [Path(root)] if Path(root).is_file() else Path(root).rglob("*"):
            if p.is_file():
                st = p.stat()
                state[str(p)] = (st.st_size, st.st_mtime_ns)
    return state


def offered_series(lists: Path) -> list[str]:
    """linux-source-X.Y names in apt's downloaded Packages files, read directly
    (apt-helper only decompresses them: the host may store them lz4 or gz)."""
    names = set()
    for f in lists.glob("*_Packages*"):
        text = subprocess.run(
            ["/usr/lib/apt/apt-helper", "cat-file", str(f)],
            capture_output=True,
            text=True,
            errors="replace",
            check=True,
        ).stdout
        names |= set(re.findall(r"^Package: linux-source-(\d+\.\d+)$", text, re.M))
    return sorted(names, key=lambda s: tuple(int(x) for x in s.split(".")))


@pytest.mark.kernel
def test_debian_latest_is_downloaded_by_apt_from_another_suite_and_verified():
    """debian:latest is the newest linux-source-X.Y of any suite (today in
    trixie-backports/sid, which this system's apt does not list): downloaded
    with apt into rtforge's cache, the system's apt untouched."""
    before = system_apt_state()
    src = prepare_source("debian:latest")
    lists = fetch.kernel_cache() / "apt" / "lists"
    offered = offered_series(lists)
    assert src.version.series == offered[-1]  # the newest series any suite has
    version = src.source_id.split("=", 1)[1]
    debs = sorted((paths.download_dir() / "debian").glob(f"linux-source-{offered[-1]}_*.deb"))
    assert debs, "the .deb apt downloaded is kept in the download cache"
    control = subprocess.run(
        ["dpkg-deb", "-f", str(debs[-1]), "Package", "Version"], capture_output=True, text=True, check=True
    ).stdout
    assert f"Package: linux-source-{offered[-1]}" in control and f"Version: {version}" in control
    assert not dpkg_version(f"linux-source-{offered[-1]}") or src.origin.startswith("/usr/src")
    assert system_apt_state() == before
    again = prepare_source(f"debian:{offered[-1]}")
    assert again.path == src.path and again.source_id == src.source_id


@pytest.fixture
def small_tree(src612, tmp_path):
    """Real 6.12 files, plus a file that makes this run's tarballs and commits new."""
    return subset_tree(src612, tmp_path / "tree", {"nonce": NONCE + "\n"})


@pytest.mark.parametrize("compress", ["xz", "gz", "none"])
def test_tar_from_a_path(small_tree, tmp_path, src612, compress):
    archive = make_tarball(small_tree, tmp_path / f"linux-6.12.tar.{compress}", compress=compress)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    src = prepare_source(f"tar:{archive}")
    assert src.source_id == f"tar:{archive.name} sha256:{digest}"
    assert src.version == src612.version and src.flavour == "mainline"
    assert (src.path / "nonce").read_text() == NONCE + "\n"
    assert detect_rt(src.path, "arm64").supported and not detect_rt(src.path, "arm").supported
    assert prepare_source(f"tar:{archive}").path == src.path  # reused
    # its own extraction's leftovers only: another worker may be extracting beside it
    assert not list(src.path.parent.glob(f".tmp-{src.path.name}-*"))


def test_tar_over_http_with_progress(small_tree, tmp_path):
    site = tmp_path / "site" / NONCE
    site.mkdir(parents=True)
    make_tarball(small_tree, site / "linux-6.12.117.tar.xz", top="linux-6.12.117")  # not the path test's bytes
    seen = []
    with serve(tmp_path / "site") as base:
        src = prepare_source(f"tar:{base}/{NONCE}/linux-6.12.117.tar.xz", lambda w, d, t: seen.append((w, d, t)))
    assert src.source_id.startswith("tar:linux-6.12.117.tar.xz sha256:")
    assert (src.path / "nonce").read_text() == NONCE + "\n"
    downloads = [s for s in seen if s[0].startswith("downloading")]
    assert downloads and downloads[-1][1] == downloads[-1][2] == (site / "linux-6.12.117.tar.xz").stat().st_size
    assert any(s[0].startswith("extracting") for s in seen)
    with serve(tmp_path / "site") as base:
        with pytest.raises(UserError, match="HTTP 404"):
            prepare_source(f"tar:{base}/{NONCE}/linux-9.9.tar.xz")


def test_bad_tarballs_leave_nothing_behind(small_tree, tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        prepare_source(f"tar:{tmp_path}/nope.tar.xz")
    (tmp_path / "notes.txt").write_text("not a tarball\n")
    with pytest.raises(UserError, match="not a tar archive"):
        prepare_source(f"tar:{tmp_path}/notes.txt")
    good = make_tarball(small_tree, tmp_path / "linux.tar.xz").read_bytes()
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(UserError, match="cannot extract"):
        prepare_source(f"tar:{cut}")
    key = "tar-" + hashlib.sha256(cut.read_bytes()).hexdigest()[:16]
    src_dir = fetch.kernel_cache() / "src"
    assert not (src_dir / key).exists() and not list(src_dir.glob(f".tmp-{key}*"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "README").write_text("hello\n")
    with pytest.raises(UserError, match="does not contain a Linux kernel source tree"):
        prepare_source(f"tar:{make_tarball(tmp_path / 'other', tmp_path / 'other.tar.xz', top='other')}")


@pytest.fixture
def bare_repo(small_tree, tmp_path):
    """A bare repository: main (mainline files), rpi-6.12.y (plus a Raspberry
    Pi defconfig, the default branch) and an annotated tag."""
    work = tmp_path / "work"
    shutil.copytree(small_tree, work)
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "mainline", cwd=work)
    git("tag", "-a", "v6.12-test", "-m", "tag", cwd=work)
    git("checkout", "-qb", "rpi-6.12.y", cwd=work)
    shutil.copy(work / "arch/arm64/configs/defconfig", work / "arch/arm64/configs/bcm2711_defconfig")
    git("add", "-A", cwd=work)
    git("commit", "-qm", "raspberry pi", cwd=work)
    bare = tmp_path / "linux.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    git("symbolic-ref", "HEAD", "refs/heads/rpi-6.12.y", cwd=bare)
    return bare, {b: git("rev-parse", b, cwd=work) for b in ("main", "rpi-6.12.y", "v6.12-test^{}")}


def test_git_branch_tag_and_default(bare_repo):
    bare, commits = bare_repo
    url = f"file://{bare}"
    src = prepare_source(f"git:{url}@main")
    assert src.source_id == f"git:{url}@{commits['main']} (branch main)"
    assert src.flavour == "mainline" and src.key == f"git-{commits['main']}"
    assert not (src.path / ".git").exists() and (src.path / "nonce").read_text() == NONCE + "\n"
    assert prepare_source(f"git:{url}@v6.12-test").path == src.path  # the tag is the same commit
    default = prepare_source(f"git:{url}")
    assert default.source_id == f"git:{url}@{commits['rpi-6.12.y']} (branch rpi-6.12.y)"
    assert default.flavour == "raspberrypi"
    by_hash = prepare_source(f"git:{url}@{commits['main']}")
    assert by_hash.path == src.path
    with pytest.raises(UserError, match="no branch or tag 'rpi-9.9.y'"):
        prepare_source(f"git:{url}@rpi-9.9.y")
    with pytest.raises(UserError, match="cannot reach"):
        prepare_source(f"git:file://{bare}-missing@main")


def test_git_offline_reuses_the_last_commit_seen(bare_repo):
    bare, commits = bare_repo
    url = f"file://{bare}"
    first = prepare_source(f"git:{url}@main")
    bare.rename(bare.with_name("away.git"))
    again = prepare_source(f"git:{url}@main")
    assert again.path == first.path and again.notes and "could not reach" in again.notes[0]
    with pytest.raises(UserError, match="cannot reach"):  # never seen offline: no guess
        prepare_source(f"git:{url}@rpi-6.12.y")


def test_rpi_source_follows_the_environment(bare_repo, monkeypatch):
    bare, commits = bare_repo
    monkeypatch.setenv(ENV_RPI_GIT_URL, f"file://{bare}")
    src = prepare_source("rpi")
    assert src.kind == "rpi" and src.spec == "rpi" and src.flavour == "raspberrypi"
    assert commits["rpi-6.12.y"] in src.source_id and "branch rpi-6.12.y" in src.source_id
    assert (src.path / "arch/arm64/configs/bcm2711_defconfig").is_file()
    main_src = prepare_source("rpi:main")
    assert main_src.flavour == "mainline" and main_src.spec == "rpi:main"


def test_dir_is_used_in_place_and_identified(small_tree, tmp_path):
    before = {p: p.stat().st_mtime_ns for p in small_tree.rglob("*")}
    src = prepare_source(f"dir:{small_tree}")
    assert src.in_place and src.path == small_tree.resolve()
    assert src.source_id.startswith(f"dir:{small_tree.resolve()}@files:{len(SUBSET) + 1},newest:")
    git("init", "-q", cwd=small_tree)
    git("add", "-A", cwd=small_tree)
    git("commit", "-qm", "x", cwd=small_tree)
    head = git("rev-parse", "HEAD", cwd=small_tree)
    assert prepare_source(f"dir:{small_tree}").source_id == f"dir:{small_tree.resolve()}@git:{head}"
    (small_tree / "Kconfig").write_text((small_tree / "Kconfig").read_text() + "\n")
    dirty = prepare_source(f"dir:{small_tree}")
    assert dirty.source_id.endswith("+dirty") and dirty.key != src.key
    assert all(p.stat().st_mtime_ns == t for p, t in before.items() if p.name != "Kconfig")  # nothing written
    (small_tree / ".config").write_text("CONFIG_X=y\n")
    with pytest.raises(UserError, match="make mrproper"):
        prepare_source(f"dir:{small_tree}")
    with pytest.raises(UserError, match="not a Linux kernel source tree"):
        prepare_source(f"dir:{tmp_path}")
    with pytest.raises(UserError, match="not a directory"):
        prepare_source(f"dir:{tmp_path}/nope")


def test_dir_on_the_real_tree(src612):
    src = prepare_source(f"dir:{src612.path}")
    assert src.version == src612.version and src.in_place and src.path == src612.path


def test_cli_source_json_and_errors(src612, capsys):
    assert main(["kernel", "source", "debian:6.12", "--board", "pi4-64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"]["source_id"] == src612.source_id and doc["source"]["version"] == str(src612.version)
    assert doc["rt"]["rt_symbol"] == "PREEMPT_RT" and doc["rt"]["rt_patch_id"] is None
    assert main(["kernel", "source", "svn:x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rtforge: error: unknown kernel source 'svn:x'")


def test_version_needs_a_kernel_makefile(tmp_path):
    (tmp_path / "Makefile").write_text("all:\n\ttrue\n")
    with pytest.raises(UserError, match="no VERSION/PATCHLEVEL"):
        read_kernel_version(tmp_path)


@pytest.mark.parametrize("argv", [["kernel", "build", "--help"], ["kernel", "source", "--help"]])
def test_help_shows_every_spec_form(argv):
    """The help texts are Rich markup, where "[@REF]" would vanish as a tag."""
    out = subprocess.run([sys.executable, "-m", "rtforge", *argv], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "200"}, check=True).stdout
    for form in ("rpi[:BRANCH]", "git:URL[@REF]", "tar:PATH|URL", "dir:PATH", "debian[:X.Y|:latest]"):
        assert form in out, (form, out)
