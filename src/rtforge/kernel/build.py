"""rtforge kernel build: source -> RT tree -> verified .config -> Kbuild -> packages.

    spec = BuildSpec(board="pi4-64", source="rpi", rt_patch=None)
    result = build_kernel(spec, progress=print_progress)   # dist/<release>-<board>/

Build directories are cached per (tree, board) under the cache dir, so a
re-run with an unchanged configuration costs only make's own checks, and a
re-run with other fragments really re-configures (the .config is always
regenerated and compared).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import tools
from ..device.deploy.bundle import open_bundle
from ..errors import UserError
from .boards import Board, get_board
from .debian import VersionNotOffered
from .fetch import kernel_cache, locked
from .kbuild import FRAGMENTS, ConfigResult, base_defconfig, configure, make_argv, run_make
from .kconfig import fragment_options, parse_option, read_config, refuse_expansion
from .kdiff import Change, differences, report_lines
from .match import MatchPlan, check_board, check_tree, fixups, plan_source
from .package import package
from .rtpatch import RtTree, prepare_rt_tree
from .running import RunningConfig, RunningKernel
from .sources import KernelSource, prepare_source

Progress = Callable[[str, int | None, int | None], None]


@dataclass
class BuildSpec:
    board: str
    source: str | None = None            # default: the board's default source
    rt_patch: str | None = None          # PATH | URL | auto; None: the tree must support RT by configuration
    fragments: list[str] = field(default_factory=lambda: ["latency"])
    user_fragments: list[Path] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    allow_dropped: bool = False
    jobs: int = 0                        # 0: all CPUs
    dist: Path = Path("dist")
    debs: bool = True
    match: RunningKernel | None = None   # --match: start from this running kernel's source and configuration
    match_host: str | None = None        # as the user named it (HOST, or local)
    config_only: bool = False            # stop after configuring (and the --match report)
    defconfig: str | None = None         # the base instead of the board's defconfig (allnoconfig, tinyconfig, ...)

    def reproducer(self) -> str:
        argv = ["rtforge", "kernel", "build", "--board", self.board]
        if self.match_host:
            argv += ["--match", self.match_host]
        if self.source:
            argv += ["--source", self.source]
        if self.defconfig:
            argv += ["--defconfig", self.defconfig]
        if self.rt_patch:
            argv += ["--rt-patch", self.rt_patch]
        if self.fragments != ["latency"]:
            argv += ["--fragments", ",".join(self.fragments) or "none"]
        for p in self.user_fragments:
            argv += ["-k", str(p)]
        for o in self.options:
            argv += ["-K", o]
        if self.allow_dropped:
            argv.append("--allow-dropped")
        if not self.debs:
            argv.append("--no-debs")
        return shlex.join(argv)


@dataclass
class BuildResult:
    release: str                         # "" when only configured
    dist: Path | None                    # None when only configured
    board: Board
    objects: int                         # compiled in this run (0: nothing to do)
    config: ConfigResult
    notes: list[str]
    match: MatchPlan | None = None       # --match: the source chosen, and what was used instead
    changes: list[Change] = field(default_factory=list)   # --match: every option that differs from the running one
    config_path: Path | None = None      # the .config built (or to be built)


def _localversion(tree: Path, build: Path, config: dict[str, str]) -> str:
    """-rtforge, with -rt in front when the release would not show RT otherwise
    (an RT patch adds its own -rtN; mainline PREEMPT_RT adds nothing).

    Read from what scripts/setlocalversion reads, rather than `make
    kernelrelease`, which needs a synced include/config/auto.conf before the
    build (a `make syncconfig` of ~3 s that the build does anyway): the
    localversion* files of the build and source trees, then
    CONFIG_LOCALVERSION.  package() takes the real release from Kbuild
    after the build."""
    parts = [f.read_text(errors="replace") for d in (build, tree) for f in sorted(d.glob("localversion*"))
             if f.is_file() and not f.name.endswith("~")]
    parts.append(config.get("LOCALVERSION", "").strip('"'))
    return "-rtforge" if any("-rt" in part for part in parts) else "-rt-rtforge"


def build_kernel(spec: BuildSpec, progress: Progress | None = None) -> BuildResult:
    report = progress or (lambda what, done, total: None)
    board = get_board(spec.board)
    _refuse_bad_input(spec)
    match = _plan_match(spec.match, board, spec.source) if spec.match is not None else None
    plan = match.plan if match else None
    tools.require(tools_before(board, spec, plan.spec if plan else None), "this kernel build")
    if match is None:
        source = prepare_source(spec.source or board.default_source, report)
    else:
        source = _matched_source(match, report)
    rt = prepare_rt_tree(source, board.arch, spec.rt_patch, progress=report)
    build = kernel_cache() / "build" / f"{rt.path.name}-{board.name}" / "obj"
    # One build directory per (tree, board): a second rtforge building the same
    # one (another terminal, a CI worker) would re-run Kbuild's host tools while
    # this one executes them ("fixdep: Error 126"), so it waits its turn.
    # what matters first, for an 80-column progress line: the folder's name ends it
    waiting = f"waiting: another rtforge is building this tree for {board.name} ({build.parent.name})"
    with build_dir_locked(build, waiting=lambda: report(waiting, None, None)):
        return _build_in(build, spec, board, match, source, rt, report)


def build_dir_locked(build: Path, waiting: Callable[[], None] | None = None) -> AbstractContextManager[None]:
    """Held while anything reads or writes a build directory (a flock: one
    process at a time; not re-entrant within a process)."""
    return locked(f"build-{build.parent.name}", waiting)


def _build_in(build: Path, spec: BuildSpec, board: Board, match: _Match | None, source: KernelSource,
              rt: RtTree, report: Progress) -> BuildResult:
    """build_kernel's steps in its build directory, which it holds."""
    tree = rt.path
    plan = match.plan if match else None
    if spec.defconfig is not None:
        base_defconfig(tree, board, source.flavour, spec.defconfig)     # refused before anything is written
    report("configuring", None, None)
    # --match starts from the running configuration (None: no --match, or the board has none: the defconfig)
    running = match.config if match else None
    given = {parse_option(o)[0] for o in spec.options}      # what -K sets is never fixed up
    generated = _match_fixups(match, board, source.flavour, tree, given) if match else {}
    cfg = configure(tree, build, board, source.flavour, rt.support, fragments=spec.fragments,
                    user_fragments=spec.user_fragments, options=spec.options, allow_dropped=spec.allow_dropped,
                    base_config=(running.where, running.text) if running else None, generated=generated,
                    defconfig=spec.defconfig)
    changes = differences(running.options, cfg.config, tree, board.srcarch, cfg.asked) if running else []
    notes = list(cfg.notes) + list(rt.notes) + list(source.notes)
    if spec.config_only:
        return BuildResult("", None, board, 0, cfg, notes, plan, changes, build / ".config")
    tools.require(tools_for_config(cfg.config, board), "this kernel configuration")
    lv = _localversion(tree, build, cfg.config)
    log = build / "build.log"
    log.write_text("")
    jobs = spec.jobs or os.cpu_count() or 1
    objects = _make(tree, build, board, source.flavour, cfg.config, lv, jobs, log, report)
    check_built_rt(build, rt.option)
    report("packaging", None, None)
    extra: dict[str, Any] = {"source_id": source.source_id, "rt_patch_id": rt.patch_id,
                             "reproducer": spec.reproducer(), "fragments": cfg.fragments, "config_notes": cfg.notes,
                             "dropped_options": [m.sentence() for m in cfg.dropped]}
    if match is not None:
        extra["match"] = {"running": match.running.to_dict(), "source": match.plan.to_dict(), "config_base": cfg.base,
                          "differences": [c.to_dict() for c in changes]}
    dist = package(tree, build, board, source.flavour, cfg.config, lv, Path(spec.dist), extra, debs=spec.debs,
                   log=log, jobs=jobs, running_config=running.text if running else None,
                   report=_report_text(match, changes) if match else None)
    release = open_bundle(dist).release
    return BuildResult(release, dist, board, objects, cfg, notes, plan, changes, build / ".config")


def _refuse_bad_input(spec: BuildSpec) -> None:
    """Bad input is refused before any step starts (nothing fetched, nothing written)."""
    for name in spec.fragments:
        if name not in FRAGMENTS:
            raise UserError(f"unknown fragment '{name}': choose from {', '.join(FRAGMENTS)} (or -k FILE for your own)")
    for p in spec.user_fragments:
        if not Path(p).is_file():
            raise UserError(f"-k {p}: no such fragment file")
        refuse_expansion(fragment_options(Path(p)), f"-k {p}")
    for o in spec.options:
        parse_option(o)
    if spec.defconfig is not None:
        check_defconfig_name(spec.defconfig, spec.match is not None)


def _make(tree: Path, build: Path, board: Board, flavour: str, config: dict[str, str], localversion: str,
          jobs: int, log: Path, report: Progress) -> int:
    """Kbuild's build of the image, the modules and the device trees the
    configuration and the board have; returns the objects compiled.  The
    progress is counted against the last build's count in this directory
    (an estimate from the options the first time)."""
    targets = [board.image_target]
    if config.get("MODULES") == "y":
        targets.append("modules")
    if board.dtbs.get(flavour):
        targets.append("dtbs")
    state_file = build / ".rtforge-build.json"
    expected = (json.loads(state_file.read_text()).get("objects") if state_file.exists() else None) or \
        _estimate(config)
    objects = run_make(make_argv(tree, build, board, targets, jobs=jobs, extra=[f"LOCALVERSION={localversion}"]),
                       log, lambda n: report("compiling", n, max(expected, n)), what="the kernel build")
    if objects:
        state_file.write_text(json.dumps({"objects": objects}))
    return objects


# A defconfig is a make target: a name such as "-j1" or "CC=x" would be an
# option or a variable to make, not a target.
_DEFCONFIG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def check_defconfig_name(name: str, match: bool) -> None:
    if not _DEFCONFIG_NAME.fullmatch(name):
        raise UserError(f"--defconfig {name!r} is not a defconfig name: a file of arch/<arch>/configs/ or a "
                        "Kconfig target such as allnoconfig (letters, digits, _ . + -)")
    if match:
        raise UserError("--defconfig and --match both choose what the configuration starts from: give one")


@dataclass
class _Match:
    """--match: the running kernel, the source planned for it, and its
    configuration, the base of the build's (None: it has none to start from)."""
    running: RunningKernel
    plan: MatchPlan
    config: RunningConfig | None


def _plan_match(running: RunningKernel, board: Board, source: str | None) -> _Match:
    """The board checked against the running kernel, its configuration
    against what Kbuild would run, and the source to build from."""
    check_board(running, board)
    config = running.configuration
    if config is not None:
        refuse_expansion(config.options, config.where)
    return _Match(running, plan_source(running, board, source), config)


def _matched_source(match: _Match, report: Progress) -> KernelSource:
    """The matched source, or -- when Debian no longer offers the exact
    package version -- the newest of the series, said so."""
    plan = match.plan
    try:
        source = prepare_source(plan.spec, report)
    except VersionNotOffered as e:
        fallback = plan.spec.partition("=")[0]
        plan.exact = False
        plan.instead.append(f"{e}: built from {fallback} instead")
        plan.spec = fallback
        source = prepare_source(fallback, report)
    check_tree(plan, match.running, source)
    return source


def _match_fixups(match: _Match, board: Board, flavour: str, tree: Path, given: set[str]) -> dict[str, dict[str, str]]:
    """--match: the fix-ups of the files the running configuration names, as
    a generated fragment (none for what -K gives), each said in the plan;
    without a running configuration, what is used instead is said."""
    running, plan = match.running, match.plan
    if match.config is None:
        plan.exact = False
        plan.instead.append(f"{running.host} has no /proc/config.gz and no /boot/config-{running.release}: "
                            f"configured from board {board.name}'s {board.defconfig_for(flavour)} instead")
        return {}
    fixed = fixups(match.config.options, tree, given)
    for sym, (value, why) in fixed.items():
        plan.instead.append(f"CONFIG_{sym}={value}: {why}")
    return {"match-fixups": {s: v for s, (v, _) in fixed.items()}} if fixed else {}


def _report_text(match: _Match, changes: list[Change]) -> str:
    running, plan = match.running, match.plan
    head = [f"running kernel: {running.release} on {running.host} ({running.machine}"
            + (f", {running.model}" if running.model else "") + ")",
            f"its package: {running.package} {running.package_version}" if running.package else "its package: none",
            f"its configuration: {running.config_from or 'none'}",
            f"source: {plan.spec} ({plan.how}){'' if plan.exact else '; not an exact match'}"]
    head += [f"instead: {line}" for line in plan.instead]
    return "\n".join(head + ["", f"{len(changes)} options differ from the running kernel's:"]
                     + report_lines(changes)) + "\n"


def check_built_rt(build: Path, symbol: str) -> None:
    """Read back what was built, not what was asked: the .config Kbuild
    built from and the UTS_VERSION it compiled into the image (uname -v).
    A kernel configured from a reused or edited .config can come out
    without full RT (PREEMPT_RT needs EXPERT and ARCH_SUPPORTS_RT); such a
    kernel is refused here rather than packaged."""
    config = read_config(build / ".config")
    if config.get(symbol) != "y":
        raise UserError(f"the build's .config has CONFIG_{symbol}={config.get(symbol, 'n')} "
                        f"({build / '.config'}): a kernel without full RT is not packaged")
    for name in ("utsversion.h", "compile.h"):
        header = build / "include" / "generated" / name
        if header.is_file() and "UTS_VERSION" in (text := header.read_text(errors="replace")):
            uts = next((line for line in text.splitlines() if "UTS_VERSION" in line), "")
            if "PREEMPT_RT" not in uts and "PREEMPT RT" not in uts:
                raise UserError(f"the kernel was compiled with {uts.split(None, 2)[-1]} as uname -v "
                                f"({header}), which does not say PREEMPT_RT: it is not packaged")
            return
    raise UserError(f"the build has no include/generated/utsversion.h or compile.h with UTS_VERSION: "
                    f"cannot tell whether it is an RT kernel ({build})")


def tools_before(board: Board, spec: BuildSpec, source: str | None = None) -> list[str]:
    """What the build needs on this machine whatever the .config says:
    fetching the source, Kbuild's host tools (Documentation/process/changes.rst),
    the board's cross compiler, and the packaging tools when .debs are wanted
    (the tree's own scripts/package/mkdebian lists them as Build-Depends)."""
    # the spec built from: --match's plan, else --source, else the board's (a board file may name a tarball too)
    chosen = source or spec.source or board.default_source
    kind = chosen.partition(":")[0]
    need = {"debian": ["apt-get", "dpkg-query", "xz"], "rpi": ["git"], "git": ["git"]}.get(kind, [])
    if kind == "tar":
        need += [{".xz": "xz", ".zst": "zstd"}.get(Path(chosen).suffix, "tar")]
    if spec.rt_patch:
        need += ["patch", "xz"]
    need += ["make", "gcc", "bc", "bison", "flex", "perl", f"{board.cross_compile}gcc"]
    if spec.debs:
        need += ["dpkg-buildpackage", "dh_listpackages", "dpkg-deb", "rsync", "cpio", "depmod",
                 "/usr/include/openssl/opensslv.h", "/usr/include/gelf.h"]
        if os.geteuid() != 0:
            need.append("fakeroot")             # Kbuild's default KBUILD_PKG_ROOTCMD
    return need


def tools_for_config(config: dict[str, str], board: Board) -> list[str]:
    """What this .config makes Kbuild run, known once it is configured and
    before anything is compiled."""
    on = {k for k, v in config.items() if v in ("y", "m")}
    need = []
    if on & {"MODULE_SIG", "SYSTEM_TRUSTED_KEYRING", "SYSTEM_REVOCATION_LIST", "MODULE_SIG_FORMAT"}:
        need.append("/usr/include/openssl/opensslv.h")   # scripts/sign-file, certs/extract-cert
    if on & {"OBJTOOL", "DEBUG_INFO_BTF", "STACK_VALIDATION"}:
        need.append("/usr/include/gelf.h")               # objtool, resolve_btfids
    if "DEBUG_INFO_BTF" in on:
        need.append("pahole")
    if "IKHEADERS" in on:
        need.append("cpio")
    if "MODULES" in on:
        need.append("depmod")
    need += [tool for opt, tool in (("KERNEL_XZ", "xz"), ("KERNEL_LZ4", "lz4"), ("KERNEL_LZO", "lzop"),
                                    ("KERNEL_ZSTD", "zstd")) if opt in on]
    return need


def _estimate(config: dict[str, str]) -> int:
    """First build of a configuration: objects scale with enabled options
    (measured on 6.12: allnoconfig+virt ~ 1.0 object per option, defconfigs
    with modules ~ 2)."""
    enabled = sum(1 for v in config.values() if v in ("y", "m"))
    modules = sum(1 for v in config.values() if v == "m")
    return enabled + modules
