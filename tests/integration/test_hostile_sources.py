"""Kernel sources rtforge cannot trust (issue 37): a source spec, a tree on
disk, a tarball and a git repository are data, never a command, and never a
way to put a host's file, a device or a setuid file into the cache.  Each
case is made for real here: real git, real GNU tar on tarballs made with
tarfile, trees of small hand-made files (enough for rtforge to call them a
kernel tree); the cache is the test's own."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.errors import UserError
from rtforge.kernel.sources import ENV_RPI_GIT_URL, prepare_source

from ..support.kernelsrc import git

MAKEFILE = "VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 9\nEXTRAVERSION =\nNAME = Baby Opossum Posse\n"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RTFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RTFORGE_DOWNLOAD_CACHE", str(tmp_path / "downloads"))


def tiny_tree(root: Path) -> Path:
    """What rtforge checks a kernel tree by: a top Makefile with the version, Kconfig, arch/."""
    for rel, text in {"Makefile": MAKEFILE, "Kconfig": 'mainmenu "Linux"\n', "arch/arm64/Kconfig": "",
                      "kernel/fork.c": "int x;\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def one_sentence(capsys) -> str:
    """The error rtforge printed: one line, no traceback (progress lines aside)."""
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("rtforge: error:")]
    assert "Traceback" not in err and len(errors) == 1, err
    return errors[0]


# ---------------------------------------------------------------- 1. a source spec is never a command

def test_a_git_url_or_ref_is_never_an_option(tmp_path, monkeypatch, capsys):
    """`git:--upload-pack=CMD` reached `git ls-remote` as an option and ran
    CMD; so did `--source` and RTFORGE_RPI_GIT_URL."""
    monkeypatch.chdir(tmp_path)
    mark = tmp_path / "ran"
    evil = f"--upload-pack=touch {mark};false"
    assert main(["kernel", "source", f"git:{evil}"]) == 2
    assert "cannot start with '-'" in one_sentence(capsys)
    assert main(["kernel", "build", "--board", "pi4-64", "--no-debs", "--config-only", "--source",
                 f"git:{evil}"]) == 2
    assert "cannot start with '-'" in one_sentence(capsys)
    monkeypatch.setenv(ENV_RPI_GIT_URL, evil)
    assert main(["kernel", "source", "rpi"]) == 2
    assert ENV_RPI_GIT_URL in one_sentence(capsys)
    monkeypatch.delenv(ENV_RPI_GIT_URL)
    assert main(["kernel", "source", f"rpi:{evil}"]) == 2
    one_sentence(capsys)
    assert not mark.exists()


def test_a_good_git_url_still_fetches(tmp_path):
    """The same URLs as before, after `--`: a local repository is fetched."""
    work = tiny_tree(tmp_path / "work")
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "x", cwd=work)
    src = prepare_source(f"git:file://{work}@main")
    assert (src.path / "kernel/fork.c").is_file() and str(src.version) == "6.12.9"


# ---------------------------------------------------------------- 2. a dir: tree's git config never runs

def test_a_trees_git_config_and_hooks_never_run(tmp_path):
    """`git config core.fsmonitor CMD` in a tree, then `kernel source
    dir:TREE`, ran CMD as root (`git status` in the identity check); a clean
    filter and an index hook are the same kind of code."""
    tree = tiny_tree(tmp_path / "tree")
    (tree / ".gitattributes").write_text("* filter=evil\n")
    git("init", "-q", "-b", "main", cwd=tree)
    git("add", "-A", cwd=tree)
    git("commit", "-qm", "x", cwd=tree)
    head = git("rev-parse", "HEAD", cwd=tree)
    marks = {name: tmp_path / name for name in ("fsmonitor", "filter", "hook")}
    git("config", "core.fsmonitor", f"touch {marks['fsmonitor']}; false", cwd=tree)
    git("config", "filter.evil.clean", f"touch {marks['filter']}; cat", cwd=tree)
    hook = tree / ".git/hooks/post-index-change"
    hook.write_text(f"#!/bin/sh\ntouch {marks['hook']}\n")
    hook.chmod(0o755)
    time.sleep(1.1)  # past git's racy-clean second: a changed file is then seen by its time stamp
    assert prepare_source(f"dir:{tree}").source_id == f"dir:{tree.resolve()}@git:{head}"
    (tree / "kernel/fork.c").write_text("int y;\n")
    assert prepare_source(f"dir:{tree}").source_id == f"dir:{tree.resolve()}@git:{head}+dirty"
    assert [name for name, mark in marks.items() if mark.exists()] == []
    assert "fsmonitor" in (tree / ".git/config").read_text()  # the tree's .git is never written


def test_head_is_read_from_a_branch_packed_or_loose_and_a_detached_head(tmp_path):
    tree = tiny_tree(tmp_path / "tree")
    git("init", "-q", "-b", "main", cwd=tree)
    git("add", "-A", cwd=tree)
    git("commit", "-qm", "x", cwd=tree)
    head = git("rev-parse", "HEAD", cwd=tree)
    git("pack-refs", "--all", cwd=tree)  # refs/heads/main now only in packed-refs
    assert prepare_source(f"dir:{tree}").source_id.endswith(f"@git:{head}")
    git("checkout", "-q", "--detach", cwd=tree)
    assert prepare_source(f"dir:{tree}").source_id.endswith(f"@git:{head}")


# ---------------------------------------------------------------- 8. a tree's Makefile: regular and bounded

@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_trees_makefile_that_is_not_a_file_is_refused_at_once(tmp_path, kind, rtforge_cmd):
    """A dir: tree whose Makefile is a FIFO hung; one linked to /dev/zero was
    read without a bound (and ignored SIGTERM): a separate process, so a hang
    is a failed test rather than a stuck suite."""
    tree = tiny_tree(tmp_path / "tree")
    (tree / "Makefile").unlink()
    if kind == "fifo":
        os.mkfifo(tree / "Makefile")
    else:
        (tree / "Makefile").symlink_to("/dev/zero")
    start = time.monotonic()
    try:
        p = subprocess.run([*rtforge_cmd, "kernel", "source", f"dir:{tree}"], capture_output=True, text=True,
                           timeout=30, env={**os.environ, "RTFORGE_CACHE_DIR": str(tmp_path / "cache")})
    except subprocess.TimeoutExpired:
        pytest.fail(f"a Makefile that is a {kind} was still being read after 30 s")
    assert time.monotonic() - start < 20
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "Makefile" in p.stderr and ("not a regular file" in p.stderr or "symbolic link" in p.stderr)


# ---------------------------------------------------------------- 7. tarballs and repositories from anywhere

def tarball(path: Path, members: list[tuple[str, bytes, str, int, str]]) -> Path:
    """A real tarball made with tarfile: (name, data, kind, mode, link target);
    kind is file, dir, symlink, fifo or chr."""
    types = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "fifo": tarfile.FIFOTYPE,
             "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE}
    with tarfile.open(path, "w:gz") as tar:
        for name, data, kind, mode, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.linkname, info.size = types[kind], mode, link, len(data)
            if kind in ("chr", "blk"):
                info.devmajor, info.devminor = (1, 3) if kind == "chr" else (7, 0)
            tar.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return path


def kernel_members(top: str = "linux-6.12.9") -> list[tuple[str, bytes, str, int, str]]:
    return [(top, b"", "dir", 0o755, ""), (f"{top}/Makefile", MAKEFILE.encode(), "file", 0o644, ""),
            (f"{top}/Kconfig", b'mainmenu "Linux"\n', "file", 0o644, ""), (f"{top}/arch", b"", "dir", 0o755, ""),
            (f"{top}/arch/arm64", b"", "dir", 0o755, ""), (f"{top}/arch/arm64/Kconfig", b"", "file", 0o644, ""),
            (f"{top}/scripts", b"", "dir", 0o755, ""),
            # a link of the tree's own, as scripts/dtc/include-prefixes/ has
            (f"{top}/scripts/arm64", b"", "symlink", 0o777, "../arch/arm64")]


def cached_trees(tmp_path: Path) -> list[str]:
    src = tmp_path / "cache" / "kernel" / "src"
    return sorted(os.listdir(src)) if src.is_dir() else []


def test_a_tarball_whose_top_entry_links_to_a_host_folder_is_refused(tmp_path):
    """The cached "source tree" was the host folder: its id the tarball's
    sha256, the files built the host's."""
    host = tiny_tree(tmp_path / "host-tree")
    archive = tarball(tmp_path / "linux.tar.gz", [("linux-6.12.9", b"", "symlink", 0o777, str(host))])
    with pytest.raises(UserError, match="a link to .* outside the tree"):
        prepare_source(f"tar:{archive}")
    assert cached_trees(tmp_path) == []


@pytest.mark.root  # a device node is made by tar as root only
@pytest.mark.parametrize("member,words", [
    (("linux-6.12.9/x.pipe", b"", "fifo", 0o644, ""), "a device, FIFO or socket"),
    (("linux-6.12.9/null", b"", "chr", 0o666, ""), "a device, FIFO or socket"),
    (("linux-6.12.9/loop0", b"", "blk", 0o660, ""), "a device, FIFO or socket"),
    (("linux-6.12.9/passwd", b"", "symlink", 0o777, "/etc/passwd"), "outside the tree"),
    (("linux-6.12.9/up", b"", "symlink", 0o777, "../.."), "outside the tree"),
])
def test_devices_fifos_and_links_out_never_reach_the_cache(tmp_path, member, words):
    archive = tarball(tmp_path / "linux.tar.gz", [*kernel_members(), member])
    with pytest.raises(UserError, match=words):
        prepare_source(f"tar:{archive}")
    assert cached_trees(tmp_path) == []
    assert not list((tmp_path / "cache").rglob("*x.pipe")) and not list((tmp_path / "cache").rglob("null"))


def test_setuid_bits_are_not_extracted(tmp_path):
    archive = tarball(tmp_path / "linux.tar.gz", [*kernel_members(),
                                                  ("linux-6.12.9/su", b"#!/bin/sh\n", "file", 0o6755, "")])
    src = prepare_source(f"tar:{archive}")
    assert (src.path / "su").stat().st_mode & 0o7777 == 0o755
    assert (src.path / "scripts/arm64/Kconfig").is_file()  # the tree's own link is kept


def test_a_repository_with_a_link_out_of_the_tree_is_refused(tmp_path):
    work = tiny_tree(tmp_path / "work")
    (work / "shadow").symlink_to("/etc/shadow")
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "x", cwd=work)
    with pytest.raises(UserError, match="'shadow', a link to '/etc/shadow' outside the tree"):
        prepare_source(f"git:file://{work}@main")
    assert cached_trees(tmp_path) == []
