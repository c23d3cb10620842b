"""What a command needs on the machine that runs it, checked before it starts.

A long job that fails at its end because a tool is missing (a 14-minute
kernel build that stops at packaging for want of debhelper) is the worst
way to learn about it.  Every command that runs external programs names
them here first; everything missing is reported in one sentence with the
Debian packages that provide it, and nothing has started yet.

The program → package table is data (data/tools.toml).  Checks go through a
`which` function, so a board is checked the same way through its transport.

    require(["make", "flex"], "the kernel build")              # this machine
    require(["cyclictest"], "the cyclictest engine", which=transport.which, where="on the board")
    require_on(transport, ["grub-reboot", "sha256sum"], "a GRUB deploy")   # one round trip to a board
"""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Callable, Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path

from .errors import UserError


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    doc = tomllib.loads((resources.files("rtforge.data") / "tools.toml").read_text())
    return dict(doc["commands"]), dict(doc["files"]), dict(doc["board"])


def package_of(name: str) -> str:
    """The Debian package providing a command or file (KeyError: unknown to rtforge)."""
    commands, files, board = _table()
    return {**board, **files, **commands}[name]


def known(*, with_board: bool = True) -> dict[str, str]:
    """Every command and file rtforge may require, with its package
    (with_board=False: only what this machine itself may need)."""
    commands, files, board = _table()
    return {**commands, **files, **(board if with_board else {})}


def board_only(name: str) -> bool:
    return name in _table()[2]


def missing(names: Iterable[str], which: Callable[[str], str | None] = shutil.which,
            exists: Callable[[str], bool] = lambda p: Path(p).exists()) -> list[str]:
    """The names not present: commands not on PATH, files that do not exist."""
    return [n for n in dict.fromkeys(names) if not (exists(n) if n.startswith("/") else which(n))]


def require(names: Iterable[str], for_what: str, *, which: Callable[[str], str | None] = shutil.which,
            exists: Callable[[str], bool] = lambda p: Path(p).exists(), where: str = "") -> None:
    """UserError naming every missing command/file and its Debian package."""
    gone = missing(names, which, exists)
    if not gone:
        return
    packages = list(dict.fromkeys(package_of(n) for n in gone))
    shown = ", ".join(f"{n} ({package_of(n)})" for n in gone)
    place = f" {where}" if where else ""
    raise UserError(f"{for_what} needs {shown}, missing{place}: install with `apt-get install {' '.join(packages)}`")


# Which of "$@" are missing on a target: one round trip however many there are.
_MISSING = 'for t in "$@"; do case "$t" in /*) [ -e "$t" ] || echo "$t";; ' \
           '*) command -v "$t" > /dev/null 2>&1 || echo "$t";; esac; done'


def require_on(transport, names: Iterable[str], for_what: str) -> None:
    """require() on a target reached through a Transport (a board: where it is named)."""
    names = list(dict.fromkeys(names))
    out = transport.run(["sh", "-c", _MISSING, "sh", *names], check=True, step=f"checking what {for_what} needs")
    gone = set(out.stdout.split())
    require(names, for_what, which=lambda n: None if n in gone else n, exists=lambda p: p not in gone,
            where=f"on {transport.name}")
