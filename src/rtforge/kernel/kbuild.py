"""Running the kernel's own Kbuild: configure with its tools, build with make.

Nothing here re-implements Kbuild: configuration is `make <defconfig>`,
`scripts/kconfig/merge_config.sh` and `make olddefconfig`; building is
`make O=<build dir> ARCH=... CROSS_COMPILE=... -j<cpus> <targets>`.  What
rtforge adds is checking (read .config back), a progress count, the full
log, and a short error when the build fails.

Configuration writes a scratch file (KCONFIG_CONFIG) and the result replaces
<build>/.config only when it differs, so re-configuring an unchanged build
leaves .config's time stamp alone and the re-run costs only make's checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .. import paths
from ..errors import UserError
from ..units import plural
from .boards import GENERIC_CONFIG_TARGETS, Board, defconfig_exists
from .kconfig import Mismatch, fragment_options, mismatches, parse_option, read_config, write_fragment
from .rtpatch import RtSupport

# A compiled object in Kbuild's short output ("  CC      kernel/fork.o",
# "  CC [M]  drivers/...", "  AS      arch/...").
_OBJECT = re.compile(rb"^\s+(?:CC|AS)(?: \[M\])?\s+\S+\.o$")
FRAGMENTS = ("latency", "tracing")


def fragment_path(name: str) -> Path:
    p = Path(str(resources.files("rtforge.data") / "fragments" / f"{name}.config"))
    if not p.is_file():
        raise UserError(f"no config fragment '{name}': rtforge ships {', '.join(FRAGMENTS)} (and -k FILE takes yours)")
    return p


def make_argv(tree: Path, out: Path, board: Board, targets: list[str], jobs: int | None = None,
              extra: list[str] | None = None) -> list[str]:
    argv = ["make", "-C", str(tree), f"O={out}", f"ARCH={board.arch}"]
    if board.cross_compile:
        argv.append(f"CROSS_COMPILE={board.cross_compile}")
    if shutil.which("ccache"):
        argv.append(f"CC=ccache {board.cross_compile}gcc")
    if jobs:
        argv.append(f"-j{jobs}")
    return argv + (extra or []) + targets


def ccache_counts() -> tuple[int, int]:
    """(hits, misses) so far in the ccache rtforge's builds use (ccache's own
    counters); (0, 0) without ccache."""
    if not shutil.which("ccache"):
        return 0, 0
    out = subprocess.run(["ccache", "--print-stats"], env=kbuild_env(), capture_output=True, text=True).stdout
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    n = lambda key: int(stats.get(key, "0"))  # noqa: E731
    return n("direct_cache_hit") + n("preprocessed_cache_hit"), n("cache_miss")


def kbuild_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CCACHE_DIR", str(paths.cache_dir() / "ccache"))
    # Paths below the kernel cache become relative in ccache's hash, so two
    # build directories of one tree (pi4-64 and pi5 share arm64's defconfig)
    # and a moved cache reuse each other's objects.
    env.setdefault("CCACHE_BASEDIR", str(paths.cache_dir() / "kernel"))
    # ...which needs the working directory out of the hash too: with -g
    # (arm64's defconfig has debug info) ccache otherwise hashes the build
    # directory and two boards never share an object.  The price is a
    # DW_AT_comp_dir naming the other build directory in a shared object's
    # debug info; nothing rtforge installs carries it (the Image has no debug
    # info, modules are installed stripped).
    env.setdefault("CCACHE_NOHASHDIR", "1")
    # Same user/host on every build: uname -v then only differs by the build's time.
    env.setdefault("KBUILD_BUILD_USER", "rtforge")
    env.setdefault("KBUILD_BUILD_HOST", "rtforge")
    # A fixed build number ("#1" in uname -v).  Kbuild would count builds, and
    # bindeb-pkg relinks with its package revision: with both pinned to 1
    # (see package.py), the .deb holds the very image of the bundle and the
    # next unchanged build has nothing to do.
    env.setdefault("KBUILD_BUILD_VERSION", "1")
    return env


def run_make(argv: list[str], log: Path, progress: Callable[[int], None] | None = None, what: str = "make",
             env: dict[str, str] | None = None) -> int:
    """Run make, appending everything to log; returns objects compiled.
    On failure: the first error lines and the log's path, as a UserError."""
    count = 0
    with open(log, "ab") as f:
        f.write(("\n$ " + " ".join(argv) + "\n").encode())
        f.flush()
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**kbuild_env(), **(env or {})}
        )
        assert proc.stdout is not None, "stdout=PIPE gives the pipe"
        for line in proc.stdout:
            f.write(line)
            if _OBJECT.match(line.rstrip()):
                count += 1
                if progress:
                    progress(count)
        rc = proc.wait()
    if rc:
        text = log.read_text(errors="replace").splitlines()
        errors = [line.strip() for line in text if re.search(r"\berror\b|Error \d|\*\*\*", line)][:4]
        raise UserError(f"{what} failed: {' | '.join(errors) or 'see the log'} (full log: {log})")
    return count


def base_defconfig(tree: Path, board: Board, flavour: str, defconfig: str | None) -> str:
    """What configuration starts from: the board's defconfig for this
    flavour, or the one --defconfig names, proven to exist in tree."""
    if defconfig is None:
        return board.defconfig_in(tree, flavour)
    if not defconfig_exists(tree, board.srcarch, defconfig):
        raise UserError(f"--defconfig {defconfig}: the source tree has no arch/{board.srcarch}/configs/"
                        f"{defconfig}, no such target in arch/{board.srcarch}/Makefile, and it is not one of "
                        f"Kconfig's own ({', '.join(GENERIC_CONFIG_TARGETS)})")
    return defconfig


@dataclass
class ConfigResult:
    config: dict[str, str]
    requested: dict[str, str]
    dropped: list[Mismatch]  # requested options Kconfig did not keep
    optional_dropped: list[Mismatch] = field(default_factory=list)
    fragments: list[str] = field(default_factory=list)
    asked: dict[str, str] = field(default_factory=dict)   # SYMBOL -> the fragment that asked for it (last wins)
    base: str = ""                                         # the defconfig, or where the base .config came from

    @property
    def notes(self) -> list[str]:
        return [f"optional {m.sentence()}" for m in self.optional_dropped]


def configure(
    tree: Path,
    build: Path,
    board: Board,
    flavour: str,
    rt: RtSupport,
    *,
    fragments: list[str],
    user_fragments: list[Path],
    options: list[str],
    allow_dropped: bool = False,
    base_config: tuple[str, str] | None = None,
    generated: dict[str, dict[str, str]] | None = None,
    defconfig: str | None = None,
) -> ConfigResult:
    """defconfig + fragments (rt, the chosen ones, the board's, the user's, -K)
    merged by Kbuild's merge_config.sh, then olddefconfig; read back.

    base_config: (where it came from, its text) replaces the defconfig and
    the board's fragment (`--match`: the running kernel's configuration).
    generated: {name: {SYMBOL: value}} fragments made by the caller, merged
    after the base and before rtforge's fragments.
    defconfig: the base instead of the board's defconfig (--defconfig: a
    lean kernel from allnoconfig plus a fragment); the board's own fragment
    still applies."""
    build.mkdir(parents=True, exist_ok=True)
    log = build / "config.log"
    log.write_text("")
    scratch = build / ".rtforge-config"
    scratch.mkdir(exist_ok=True)
    # Configure into a scratch file, not the build's .config: an unchanged
    # result then leaves .config and its time stamp alone (make has nothing
    # to do).  KCONFIG_CONFIG names that file, and the build directory's own
    # Kconfig tools do the work (a scratch O= would compile them twice).
    scratch_env = {"KCONFIG_CONFIG": str(scratch / ".config")}
    if base_config is None:
        defconfig = base_defconfig(tree, board, flavour, defconfig)
        run_make(make_argv(tree, build, board, [defconfig]), log, what=f"make {defconfig}", env=scratch_env)
        base = defconfig
    else:
        base, text = base_config
        (scratch / ".config").write_text(text)

    own = board.fragment_for(flavour) if base_config is None else ""    # base_config stands in for it too
    files = _fragment_files(scratch, rt, own, fragments, user_fragments, options, generated or {})
    requested, optional, asked = _asked_for(files)
    _merge(tree, scratch, [path for _, path, _ in files], log)
    run_make(make_argv(tree, build, board, ["olddefconfig"]), log, what="make olddefconfig", env=scratch_env)

    config = read_config(scratch / ".config")
    srcarch = rt.srcarch
    result = ConfigResult(
        config,
        requested,
        mismatches(requested, config, tree, srcarch),
        mismatches(optional, config, tree, srcarch),
        [name for name, _, _ in files],
        asked,
        base,
    )
    if result.dropped and not allow_dropped:
        raise UserError(
            f"Kconfig dropped {plural(len(result.dropped), 'requested option')}: "
            + "; ".join(m.sentence() for m in result.dropped)
            + ": enable what they depend on (e.g. with -K), or build anyway with --allow-dropped"
        )
    _replace_if_changed(build / ".config", (scratch / ".config").read_bytes())
    # No syncconfig here: the build's own make syncs include/config/ from
    # the new .config (only when it changed), as a bare `make` would.
    return result


# A fragment to merge: (its name, its file, whether Kconfig must keep what it asks)
_Fragment = tuple[str, Path, bool]


def _fragment_files(scratch: Path, rt: RtSupport, own: str, fragments: list[str], user_fragments: list[Path],
                    options: list[str], generated: dict[str, dict[str, str]]) -> list[_Fragment]:
    """The fragments in merge order, later ones winning: the caller's
    generated ones, RT, rtforge's chosen ones, the board's own (own: "" for
    none), the user's -k files, then -K.  Only latency-optional's options
    may be dropped by Kconfig: not every arch and configuration has them."""
    files: list[_Fragment] = []
    for name, values in generated.items():
        write_fragment(scratch / f"{name}.config", values)
        files.append((name, scratch / f"{name}.config", True))
    # patches before 5.3 name the option PREEMPT_RT_FULL
    rt_fragment = "rt-full" if rt.symbol == "PREEMPT_RT_FULL" else "rt"
    files.append((rt_fragment, fragment_path(rt_fragment), True))
    for name in fragments:
        files.append((name, fragment_path(name), True))
        if name == "latency":
            files.append(("latency-optional", fragment_path("latency-optional"), False))
    if own:
        files.append((own, fragment_path(own), True))
    for p in user_fragments:
        # absolute: merge_config.sh runs in the tree, where a relative -k path names nothing
        files.append((str(p), Path(p).resolve(), True))
    if options:
        cli = scratch / "cli-options.config"
        write_fragment(cli, dict(parse_option(o) for o in options))
        files.append(("-K", cli, True))
    return files


def _asked_for(files: list[_Fragment]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(requested, optional, asked): the value each symbol is asked for by a
    required or an optional fragment, and the name of that fragment -- as
    merge_config.sh merges them, the last fragment naming a symbol wins."""
    requested: dict[str, str] = {}
    optional: dict[str, str] = {}
    asked: dict[str, str] = {}
    for name, path, required in files:
        for sym, value in fragment_options(path).items():
            (requested if required else optional)[sym] = value
            (optional if required else requested).pop(sym, None)
            asked[sym] = name
    return requested, optional, asked


def _merge(tree: Path, scratch: Path, fragments: list[Path], log: Path) -> None:
    """Kbuild's merge_config.sh: the fragments onto scratch's .config, in
    order; -m: no olddefconfig of its own (the caller runs it, with O=)."""
    merge = [
        "bash",
        str(tree / "scripts/kconfig/merge_config.sh"),
        "-m",
        "-O",
        str(scratch),
        str(scratch / ".config"),
        *(str(p) for p in fragments),
    ]
    proc = subprocess.run(merge, cwd=tree, capture_output=True, text=True, env=kbuild_env())
    with open(log, "a") as f:
        f.write("$ " + " ".join(merge) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode:
        raise UserError(f"merge_config.sh failed: {proc.stderr.strip().splitlines()[-1:]} (full log: {log})")


def _replace_if_changed(path: Path, new: bytes) -> None:
    """Write path only when its bytes change: an unchanged .config keeps its
    time stamp, and make then has nothing to do."""
    if not path.exists() or path.read_bytes() != new:
        path.write_bytes(new)
