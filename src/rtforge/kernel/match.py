"""`rtforge kernel build --match HOST`: the source and the configuration of
the kernel a board runs, so the RT kernel differs from it only by RT, the
fragments asked for, and what Kconfig makes follow from those.

Where the source comes from (what the board's package says, most exact first):

  Raspberry Pi OS, bookworm and later: linux-image-<X.Y.Z>+rpt-rpi-<flavour>
      (version 1:X.Y.Z-N+rptM, built from raspberrypi/linux): the commit or
      tag its changelog names, else the branch rpi-X.Y.y (whose head may have
      moved past X.Y.Z: then that is said)
  Raspberry Pi OS before bookworm: raspberrypi-kernel 1:1.YYYYMMDD-N, whose
      version raspberrypi/linux tags as raspberrypi-kernel_1.YYYYMMDD-N (the
      maintainers tag each package version: raspberrypi/linux issues 2253, 3643)
  Debian: linux-image-<release> version V, from the source package linux:
      Debian's linux-source-X.Y of the same version V (debian:X.Y=V); when no
      suite offers V any more, the newest X.Y, said so
  anything else: the board's default source, said so

Every place where the match is not exact says what was used instead
(`MatchPlan.instead`), and the bundle records it.

    plan_source(running, board) -> MatchPlan
    check_board(running, board) -> None       UserError when the board file does not fit
    suggest_boards(running) -> [board names]
    fixups(config, tree, given) -> {SYMBOL: (value, why)}  files the running config names: only the tree's kept
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .boards import Board, load_boards
from .running import RunningKernel
from .sources import KernelSource

# Raspberry Pi OS's kernel flavours (the release's suffix) and the board
# each one is built for: +rpt-rpi-v8 is kernel8.img's, +rpt-rpi-2712 the Pi 5's.
RPI_FLAVOURS = {"rpi-v6": "pi1", "rpi-v7": "pi2", "rpi-v7l": "pi4-32", "rpi-v8": "pi4-64", "rpi-2712": "pi5"}
# Before bookworm: 6.1.21+ (Pi 1), -v7+, -v7l+, -v8+, and the Pi 5's -v8-16k+.
LEGACY_SUFFIXES = {"+": "pi1", "-v7+": "pi2", "-v7l+": "pi4-32", "-v8+": "pi4-64", "-v8-16k+": "pi5"}


@dataclass
class MatchPlan:
    spec: str                    # the source spec to build from
    how: str                     # one sentence: where it comes from
    exact: bool                  # the board's package named exactly this source
    origin: str                  # raspberrypi | debian | unknown
    instead: list[str] = field(default_factory=list)   # what could not be matched, and what was used instead

    def to_dict(self) -> dict:
        return {"spec": self.spec, "how": self.how, "exact": self.exact, "origin": self.origin,
                "instead": list(self.instead)}


def rpi_flavour(release: str) -> str | None:
    m = re.search(r"\+rpt-(rpi-[a-z0-9]+)$", release)
    return m[1] if m else None


def legacy_rpi_suffix(release: str) -> str | None:
    m = re.fullmatch(r"\d+\.\d+\.\d+((?:-v[0-9a-z-]+)?\+)", release)
    return m[1] if m else None


def is_raspberry_pi_os(k: RunningKernel) -> bool:
    return bool(rpi_flavour(k.release) or legacy_rpi_suffix(k.release)
                or (k.package_version and "+rpt" in k.package_version) or k.package == "raspberrypi-kernel")


def is_debian(k: RunningKernel) -> bool:
    if is_raspberry_pi_os(k):
        return False
    return bool((k.package or "").startswith("linux-image-") and k.package_version
                and (k.source_package or "").startswith("linux")) or " Debian " in f" {k.uname_v} "


def suggest_boards(k: RunningKernel) -> list[str]:
    """The boards whose kernels this board can run: by Raspberry Pi OS's
    flavour when the release names one, else by machine and model."""
    named = RPI_FLAVOURS.get(rpi_flavour(k.release) or "") or LEGACY_SUFFIXES.get(legacy_rpi_suffix(k.release) or "")
    if named:
        return [named]
    fits = [b.name for b in load_boards().values()
            if k.machine and b.fits_machine(k.machine) and (not k.model or b.fits_model(k.model))
            and (b.pis or not k.model.startswith("Raspberry Pi"))]
    pis = [n for n in fits if load_boards()[n].pis]
    return pis or fits


def check_board(k: RunningKernel, board: Board) -> None:
    """Refuse a board file whose kernels cannot be the running kernel's kind."""
    others = [n for n in suggest_boards(k) if n != board.name]
    hint = f": use --board {' or --board '.join(others)}" if others else ""
    if k.machine and not board.fits_machine(k.machine):
        raise UserError(f"{k.host} runs {k.release}, an {k.machine} kernel, and board {board.name} builds "
                        f"{'/'.join(board.uname_m)} kernels{hint}")
    if k.model and not board.fits_model(k.model):
        raise UserError(f"{k.host} is a {k.model}, which board {board.name} does not build for "
                        f"({board.description}){hint}")
    named = RPI_FLAVOURS.get(rpi_flavour(k.release) or "") or LEGACY_SUFFIXES.get(legacy_rpi_suffix(k.release) or "")
    if named and named != board.name:
        raise UserError(f"{k.host} runs Raspberry Pi OS's {k.release}, the kernel of board {named}, "
                        f"not of {board.name}: use --board {named}")


def _rpi_plan(k: RunningKernel) -> MatchPlan:
    v = k.version
    branch = f"rpi-{v.version}.{v.patchlevel}.y" if v else None
    for ref in k.refs:
        if ref.kind in ("commit", "tag") and not ref.value.startswith("v"):
            return MatchPlan(f"rpi:{ref.value}", f"{k.package} {k.package_version} names {ref.kind} {ref.value} "
                             f"of raspberrypi/linux in its changelog", True, "raspberrypi")
    if k.package == "raspberrypi-kernel" and k.package_version:
        m = re.fullmatch(r"(?:\d+:)?(1\.\d{8}-\d+)", k.package_version)
        if m:
            tag = f"raspberrypi-kernel_{m[1]}"
            return MatchPlan(f"rpi:{tag}", f"raspberrypi-kernel {k.package_version} is raspberrypi/linux's tag "
                             f"{tag}", True, "raspberrypi")
    if branch is None:
        raise UserError(f"{k.host} runs {k.release}, which names no kernel version: build with --source")
    instead = []
    short = [r.value for r in k.refs if r.kind == "short-commit"]
    if short:
        instead.append(f"the changelog names commit {short[0]}, too short to fetch by itself: built from the "
                       f"branch {branch} (give --source rpi:<the full 40-digit hash> for that commit)")
    elif k.package:
        instead.append(f"{k.package} {k.package_version} names no raspberrypi/linux commit or tag in its "
                       f"changelog: built from the head of the branch {branch}")
    else:
        instead.append(f"no package says where {k.release} was built from (no dpkg database): built from the "
                       f"head of the branch {branch}")
    return MatchPlan(f"rpi:{branch}", f"{k.release} is Raspberry Pi OS's kernel from raspberrypi/linux {branch}",
                     False, "raspberrypi", instead)


def _debian_plan(k: RunningKernel) -> MatchPlan:
    v = k.version
    if v is None:
        raise UserError(f"{k.host} runs {k.release}, which names no kernel version: build with --source")
    series = f"{v.version}.{v.patchlevel}"
    version = k.package_version
    if not version:
        m = re.search(r"\bDebian (\S+)", k.uname_v)
        version = m[1] if m else None
    if version and re.fullmatch(r"[0-9][A-Za-z0-9.+~:-]*", version):
        how = (f"{k.package} {version} is built from Debian's linux source {version}" if k.package else
               f"uname -v names Debian's kernel {version} (no dpkg database to ask)")
        return MatchPlan(f"debian:{series}={version}", how, bool(k.package), "debian",
                         [] if k.package else [f"the version {version} comes from uname -v, not from a package"])
    return MatchPlan(f"debian:{series}", f"{k.release} looks like Debian's {series}", False, "debian",
                     [f"no package version for {k.release}: built from Debian's newest linux-source-{series}"])


def plan_source(k: RunningKernel, board: Board, source: str | None = None) -> MatchPlan:
    """Which source to build from; source: the user's --source, which wins."""
    if source:
        return MatchPlan(source, f"--source {source} was given", False, "given",
                         [f"the source is the one given (--source {source}), not one read from {k.host}"])
    if is_raspberry_pi_os(k):
        return _rpi_plan(k)
    if is_debian(k):
        return _debian_plan(k)
    who = f"{k.package} {k.package_version}" if k.package else "no package (no dpkg database, or none owns it)"
    return MatchPlan(board.default_source, f"board {board.name}'s default source", False, "unknown",
                     [f"{k.release} comes from {who}, which rtforge cannot trace to a source: built from board "
                      f"{board.name}'s default source {board.default_source}"])


def check_tree(plan: MatchPlan, k: RunningKernel, source: KernelSource) -> None:
    """Say so when the tree is not the running kernel's version."""
    v = k.version
    if v is None:
        return
    got = source.version
    if (got.version, got.patchlevel, got.sublevel) != (v.version, v.patchlevel, v.sublevel):
        plan.exact = False
        plan.instead.append(f"{k.host} runs {v}, and {source.spec} is {got}: the kernel is built from {got}")


# Options whose value names a file (or a folder) that Kbuild builds into the
# kernel or uses to sign it, with what each means without one.  The running
# configuration names files of the tree it was built in (Debian trusts its
# own certificates: debian/certs/...), on which Kbuild stops; and a board's
# configuration is not the build host's to take files from: an
# INITRAMFS_SOURCE or EXTRA_FIRMWARE naming /etc/shadow, or a MODULE_SIG_KEY
# naming this machine's private key, would put them into the kernel that goes
# back to the board (a pkcs11: key may name a library to load).
_FILE_OPTIONS = {"SYSTEM_TRUSTED_KEYS": '""', "SYSTEM_REVOCATION_KEYS": '""', "SYSTEM_BLACKLIST_HASH_LIST": '""',
                 "EXTRA_FIRMWARE": '""', "INITRAMFS_SOURCE": '""', "MODULE_SIG_KEY": '"certs/signing_key.pem"',
                 "UNUSED_KSYMS_WHITELIST": '""', "BOOT_CONFIG_EMBED_FILE": '""', "IPE_BOOT_POLICY": '""',
                 "ACPI_CUSTOM_DSDT_FILE": '""', "CFG80211_EXTRA_REGDB_KEYDIR": '""'}


def _in_tree(tree: Path, name: str) -> bool:
    """A plain relative path naming a regular file of the tree, through no link."""
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return False
    here = Path(tree)
    for part in parts:
        here = here / part
        if here.is_symlink():
            return False
    return here.is_file()


def fixups(config: dict[str, str], tree: Path, given: Collection[str] = ()) -> dict[str, tuple[str, str]]:
    """{SYMBOL: (value, why)} for options of the running config that name
    files: kept only when they name a file of this tree; a file of the build
    host is never taken from a board's configuration -- only from the user's
    own -K (the symbols in `given`, left alone here)."""
    out = {}
    for sym, empty in _FILE_OPTIONS.items():
        value = config.get(sym, "").strip('"')
        if sym in given or not value or f'"{value}"' == empty:
            continue
        names = value.split() if sym == "EXTRA_FIRMWARE" else [value]
        # EXTRA_FIRMWARE's names are below EXTRA_FIRMWARE_DIR: this machine's /lib/firmware
        outside = [n for n in names if sym == "EXTRA_FIRMWARE" or not _in_tree(tree, n)]
        if not outside:
            continue
        name = outside[0]
        if sym == "EXTRA_FIRMWARE" or name.startswith(("/", "pkcs11:")) or ".." in name.split("/"):
            why = (f"the running kernel's {name[:80]} would be this machine's file, which rtforge never builds into "
                   f"a kernel from a board's configuration (give it with -K CONFIG_{sym}=... to build it in)")
        else:
            why = f"the running kernel's {name[:80]} is a file of the tree it was built in"
        out[sym] = (empty, why)
    return out
