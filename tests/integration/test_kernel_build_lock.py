"""Two rtforge builds of one build directory (two terminals, two CI workers):
the second waits for the first, says so, and only then configures.

Found in CI: a config-only --match and a full build of the same tree and
board ran Kbuild in one directory at once; one rebuilt scripts/basic/fixdep
while the other executed it ("fixdep ... Error 126").  Here the first build
is this test holding the build directory's lock, the second a real
`rtforge kernel build --config-only` in a process of its own."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtforge.kernel.build import BuildSpec, build_dir_locked, build_kernel

pytestmark = [pytest.mark.slow, pytest.mark.kernel, pytest.mark.usefixtures("kernel_cache_cleanup")]

ARGS = ["--board", "pi4-64", "--source", "debian:6.12", "--defconfig", "allnoconfig", "--config-only"]


def lines_until(proc: subprocess.Popen, words: str, timeout: float) -> list[str]:
    """proc's stderr lines up to the first that holds words (all of them if it ends first)."""
    assert proc.stderr is not None
    seen: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not sel.select(timeout=1):
            continue
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if words in line:
            break
    return seen


def test_a_second_build_of_the_same_directory_waits_and_says_so(src612, tmp_path):
    first = build_kernel(BuildSpec(board="pi4-64", source="debian:6.12", defconfig="allnoconfig",
                                   config_only=True, dist=tmp_path / "dist"))
    build = first.config_path.parent
    env = {**os.environ, "TERM": "dumb", "COLUMNS": "80"}
    with build_dir_locked(build):
        before = (build / ".config").stat().st_mtime_ns
        proc = subprocess.Popen([sys.executable, "-m", "rtforge", "kernel", "build", *ARGS,
                                 "--dist", str(tmp_path / "dist2")],
                                stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        try:
            said = lines_until(proc, "waiting: another rtforge", timeout=120)
            assert said and said[-1].startswith("waiting: another rtforge is building this tree for pi4-64 "
                                                f"({build.parent.name})"), said
            time.sleep(2)                       # it goes on waiting: nothing configured meanwhile
            assert proc.poll() is None, (proc.returncode, said)
            assert (build / ".config").stat().st_mtime_ns == before
        except BaseException:
            proc.kill()
            raise
    out, rest = proc.communicate(timeout=300)
    after = said + rest.splitlines()
    assert proc.returncode == 0, after
    waited = next(i for i, line in enumerate(after) if "waiting: another rtforge" in line)
    assert any(line.startswith("configuring") for line in after[waited + 1:]), after
    assert Path(build / ".config").read_text().count("CONFIG_PREEMPT_RT=y") == 1
