"""A stand-in for github.com/raspberrypi/linux: a local git repository of
Debian's full 6.12 tree with the Raspberry Pi defconfigs rtforge's board
files name (bcm2711_defconfig: arm64 defconfig with -v8; bcm2712_defconfig:
with 16K pages and -v8-16k; arm's bcm2711_defconfig: multi_v7 with LPAE and
-v7l), on a branch rpi-6.12.y with a tag, which rtforge fetches through
RTFORGE_RPI_GIT_URL exactly as it fetches the real one."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

from rtforge.kernel import fetch

from .kernelsrc import GIT_ENV

TAG = "stable_20251117"
DEFCONFIGS = {  # path in the tree: (the defconfig it starts from, lines added)
    "arch/arm64/configs/bcm2711_defconfig": ("arch/arm64/configs/defconfig", 'CONFIG_LOCALVERSION="-v8"\n'),
    "arch/arm64/configs/bcm2712_defconfig": ("arch/arm64/configs/defconfig",
                                            'CONFIG_LOCALVERSION="-v8-16k"\nCONFIG_ARM64_16K_PAGES=y\n'),
    "arch/arm/configs/bcm2711_defconfig": ("arch/arm/configs/multi_v7_defconfig",
                                          'CONFIG_LOCALVERSION="-v7l"\nCONFIG_ARM_LPAE=y\n'),
}


def rpi_layout_repo(src) -> tuple[Path, str]:
    """The repository made from src (a prepared Debian 6.12 tree) once per
    recipe and kept in the test cache (git add of 86 000 files: a minute),
    and the commit its tag names."""
    recipe = hashlib.sha256((repr(DEFCONFIGS) + src.source_id).encode()).hexdigest()[:12]
    # beside the kernel cache, not in the fixture cache: the tree is hard-linked from src's
    repo = fetch.kernel_cache().parent / "test-repos" / f"rpi-layout-{recipe}"
    repo.parent.mkdir(parents=True, exist_ok=True)
    with open(repo.parent / f".lock-{repo.name}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)       # two pytest workers: one makes it, the other waits
        if not (repo / ".git" / "rtforge-complete").exists():
            _make(src, repo)
    commit = subprocess.run(["git", "rev-parse", f"{TAG}^{{}}"], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.strip()
    return repo, commit


def _make(src, repo: Path) -> None:
    shutil.rmtree(repo, ignore_errors=True)
    # hard links: the tree is never written in place, only new files are added
    subprocess.run(["cp", "-al", str(src.path), str(repo)], check=True)
    (repo / ".gitignore").unlink()       # Debian's ignores everything at the top: not raspberrypi/linux's
    for rel, (base, extra) in DEFCONFIGS.items():
        (repo / rel).write_text((src.path / base).read_text() + extra)
    for args in (["init", "-q", "-b", "rpi-6.12.y"], ["add", "-f", "-A"], ["commit", "-qm", "Linux 6.12"],
                 ["tag", "-a", TAG, "-m", TAG]):
        subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True)
    (repo / ".git" / "rtforge-complete").touch()
