"""Two build directories of one kernel tree share ccache's objects.

pi4-64 and pi5 build arm64's defconfig (which has debug info, so -g) into
build directories of their own; the second board must hit the cache the
first filled.  Checked with the real ccache and gcc, in the build layout
rtforge uses (the tree and the build directories below the kernel cache),
by ccache's own statistics.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rtforge.kernel.kbuild import ccache_counts, kbuild_env

pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache (make setup installs it)")


def test_a_second_build_directory_hits_the_first_ones_objects(tmp_path, monkeypatch):
    monkeypatch.setenv("RTFORGE_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("CCACHE_DIR", "CCACHE_BASEDIR", "CCACHE_NOHASHDIR", "CCACHE_HASHDIR", "CCACHE_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    env = kbuild_env()
    kernel = tmp_path / "cache" / "kernel"
    src = kernel / "src" / "linux"
    src.mkdir(parents=True)
    (src / "fork.c").write_text("int rtforge_fork(int x) { return x * 2 + 1; }\n")
    for board in ("pi4-64", "pi5"):
        out = kernel / "build" / f"linux-{board}"
        out.mkdir(parents=True)
        # a Kbuild-like command line: relative source path, -g, object in the build dir
        subprocess.run(["ccache", "gcc", "-g", "-O2", "-c", "../../src/linux/fork.c", "-o", "fork.o"],
                       cwd=out, env=env, check=True)
    hits, misses = ccache_counts()
    assert misses == 1 and hits == 1, (hits, misses)
    # and the hit is a real object
    assert (kernel / "build" / "linux-pi5" / "fork.o").read_bytes()[:4] == b"\x7fELF"


def test_ccache_counts_are_ccaches_own(tmp_path, monkeypatch):
    monkeypatch.setenv("RTFORGE_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("CCACHE_DIR", "CCACHE_BASEDIR", "CCACHE_NOHASHDIR", "CCACHE_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    assert ccache_counts() == (0, 0)
    for _ in range(3):
        subprocess.run(["ccache", "gcc", "-c", "a.c", "-o", "a.o"], cwd=tmp_path, env=kbuild_env(), check=True)
    assert ccache_counts() == (2, 1)
