"""Output paths the user names: a regular file or nothing yet -- never a
device (`report -o /dev/null` once replaced /dev/null with a file), a FIFO,
a folder or a symbolic link; refused with one sentence, exit 2, nothing
written anywhere and no temporary file left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rtforge.cli import main

GOLDEN = Path(__file__).parents[1] / "golden" / "cyclictest"


@pytest.fixture
def rd(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["import", str(GOLDEN / "hist.txt"), "--results-dir", str(results)]) == 0
    capsys.readouterr()
    return ["--results-dir", str(results)]


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under folder, with what identifies its content and kind."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = os.lstat(p)
        out[str(p)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino,
                       os.readlink(p) if p.is_symlink() else None)
    return out


def commands(target: Path) -> list[list[str]]:
    return [["report", "last", "-f", "html", "-o", str(target)], ["report", "last", "-f", "md", "-o", str(target)],
            ["plot", "last", "-o", str(target)]]


def _device(p: Path):
    os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers, in the test's folder


KINDS = {
    "a device": _device,
    "a FIFO": lambda p: os.mkfifo(p),
    "a folder": lambda p: p.mkdir(),
    "a link to a file": lambda p: (p.with_name("precious").write_text("keep me"), p.symlink_to("precious")),
    "a dangling link": lambda p: p.symlink_to(p.with_name("nowhere")),
    "a link to a folder": lambda p: (p.with_name("dir").mkdir(), p.symlink_to("dir")),
}


@pytest.mark.parametrize("kind", KINDS)
def test_an_output_that_is_not_a_regular_file_is_refused(tmp_path, rd, capsys, kind):
    if kind == "a device" and os.geteuid() != 0:
        pytest.skip("mknod needs root")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for argv in commands(out_dir / "target.svg"):
        target = out_dir / "target.svg"
        KINDS[kind](target)
        before = snapshot(tmp_path)
        assert main([*argv, *rd]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rtforge: error: cannot write {target}: it is ") and err.count("\n") == 1, err
        assert snapshot(tmp_path) == before  # the target untouched, no temp file beside it
        for p in sorted(out_dir.iterdir(), reverse=True):
            p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()


@pytest.mark.slow
def test_a_regular_file_is_replaced_whole_and_nothing_else_is_left(tmp_path, rd, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.html").write_text("old report")
    os.link(out / "r.html", out / "hardlink")
    assert main(["report", "last", "-o", str(out / "r.html"), *rd]) == 0
    assert (out / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert (out / "hardlink").read_text() == "old report"  # replaced by rename: the other name keeps the old file
    assert sorted(p.name for p in out.iterdir()) == ["hardlink", "r.html"]
    assert main(["report", "last", "-f", "md", "-o", str(out / "r.md"), *rd]) == 0
    assert main(["report", "last", "-f", "md", "-o", str(out / "r.md"), *rd]) == 0  # again: its plots replaced
    assert sorted(p.name for p in out.iterdir()) == ["hardlink", "r.html", "r.md", "r_files"]
    assert all(p.suffix == ".svg" for p in (out / "r_files").iterdir())


def test_a_markdown_report_never_replaces_a_folder_it_did_not_make(tmp_path, rd, capsys):
    out = tmp_path / "out"
    (out / "notes_files").mkdir(parents=True)
    (out / "notes_files" / "thesis.tex").write_text("years of work")
    assert main(["report", "last", "-f", "md", "-o", str(out / "notes.md"), *rd]) == 2
    err = capsys.readouterr().err
    assert "is not a folder of plots rtforge made" in err and err.count("\n") == 1
    assert (out / "notes_files" / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in out.iterdir()) == ["notes_files"]


@pytest.mark.parametrize("where", ["/proc/version", "/proc/self/rtforge.html", "/sys/rtforge.svg"])
def test_pseudo_file_systems_are_one_sentence(where, rd, capsys):
    for argv in (["report", "last", "-f", "html", "-o", where],
                 ["plot", "last", "-o", str(Path(where).with_suffix(".svg"))]):
        assert main([*argv, *rd]) == 2
        err = capsys.readouterr().err
        assert err.startswith("rtforge: error: cannot write ") and err.count("\n") == 1, err
    assert Path("/proc/version").read_text()


def test_a_missing_folder_is_one_sentence(tmp_path, rd, capsys):
    for argv in commands(tmp_path / "no" / "such" / "r.svg"):
        assert main([*argv, *rd]) == 2
        err = capsys.readouterr().err
        assert "is not a directory" in err and err.count("\n") == 1
    assert not (tmp_path / "no").exists()
