"""paths.read_regular_bounded: the one bounded, regular-file-only read of a
file rtforge did not write (a tree's Makefile, .git's refs, a bundle's
files): answered at once for a FIFO, a device, a link or an oversized file."""

from __future__ import annotations

import os

import pytest

from rtforge.errors import UserError
from rtforge.paths import read_regular_bounded


def test_a_regular_file_within_its_bound_is_read(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    assert read_regular_bounded(tmp_path / "f", 3, "f") == b"abc"


def test_a_missing_file_is_the_callers_to_judge(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular_bounded(tmp_path / "nope", 10, "nope")


@pytest.mark.parametrize("make,words", [
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "symbolic link"),
    (lambda p: p.mkdir(), "not a regular file"),
    (lambda p: p.write_bytes(b"x" * 11), "more than the 10"),
])
def test_anything_else_is_one_sentence(tmp_path, make, words):
    make(tmp_path / "f")
    with pytest.raises(UserError, match=words) as e:
        read_regular_bounded(tmp_path / "f", 10, "the tree's f")
    assert str(e.value).startswith("the tree's f ") and "\n" not in str(e.value)
