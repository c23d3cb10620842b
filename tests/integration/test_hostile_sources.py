"""Kernel sources rtforge cannot trust (issue 37): a source spec, a tree on
disk, a tarball and a git repository are data, never a command, and never a
way to put a host's file, a device or a setuid file into the cache.  Each
case is made for real here: real git, real GNU tar on tarballs made with
tarfile, trees of small hand-made files (enough for rtforge to call them a
kernel tree); the cache is the test's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtforge.cli import main
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
