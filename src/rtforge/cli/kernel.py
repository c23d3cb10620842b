"""rtforge kernel …: boards, sources and RT enablement (build, verify and
boot-test register here too)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from ..device import LocalTransport, SshTransport
from ..device.deploy.bundle import open_bundle
from ..errors import UserError
from ..kernel.boards import FLAVOURS, get_board, load_boards
from ..kernel.boottest import boot_test
from ..kernel.build import BuildResult, BuildSpec, build_kernel, check_defconfig_name
from ..kernel.kdiff import report_lines
from ..kernel.rtpatch import prepare_rt_tree
from ..kernel.running import read_running
from ..kernel.sources import SPEC_HELP, prepare_source
from ..paths import resolved
from ..results.store.runstore import Store
from ..units import parse_timeout_s
from .common import RESULTS_DIR, LiveLine
from .render import Col, fitted, make_console, print_table

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


SPEC_RICH = SPEC_HELP.replace("[", "\\[")   # help texts are Rich markup, which would eat "[@REF]"

kernel_app = typer.Typer(no_args_is_help=True, help="Build PREEMPT_RT kernels for Raspberry Pis and other boards.")
app.add_typer(kernel_app, name="kernel")


# Which name is which Pi comes first; build details go when the terminal is narrow.
BOARD_COLS = [Col("board", key=True, wrap=True, min_width=15), Col("what", key=True, wrap=True, min_width=24),
              Col("arch", drop=5),
              Col("defconfig (raspberrypi tree)", drop=1, wrap=True, min_width=12),
              Col("defconfig (mainline)", drop=2, wrap=True, min_width=12), Col("image on the board", drop=3),
              Col("emulated on (QEMU)", drop=4, wrap=True, min_width=12)]


@kernel_app.command()
def boards(as_json: bool = typer.Option(False, "--json", help="every field of every board as JSON")) -> None:
    """Every supported board: architecture, defconfig per source flavour, image name."""
    all_boards = load_boards()
    if as_json:
        print(json.dumps([b.to_dict() for b in all_boards.values()], indent=1))
        return
    rows = [[Text(b.name + (f"\n({', '.join(b.aliases)})" if b.aliases else "")), b.description, b.arch,
             *(b.defconfig.get(f, "–") for f in FLAVOURS), b.image_name, _emulated(b)] for b in all_boards.values()]
    console = make_console()
    print_table(console, fitted(console, BOARD_COLS, rows))


def _emulated(b) -> str:
    if not b.emulated:
        return "–"
    if all(e.stand_in for e in b.emulated):
        return "no emulated board; " + ", ".join(f"{e.machine} {e.cpu}".strip() for e in b.emulated) + " stands in"
    return ", ".join(e.machine + (" (stand-in)" if e.stand_in else "") for e in b.emulated)


@kernel_app.command(help="Fetch (or reuse) a kernel source tree; with --board, prove PREEMPT_RT can be enabled "
                         "in it (with --rt-patch: by patching a copy).  SPEC: " + SPEC_RICH + ".")
def source(
    spec: str = typer.Argument(..., help=SPEC_RICH),
    board: str | None = typer.Option(None, "--board", "-b", help="check RT enablement for this board's arch"),
    rt_patch: str | None = typer.Option(None, "--rt-patch", help="PATH|URL|auto: an RT patch or series"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    b = get_board(board) if board else None
    console = make_console()
    err = Console(stderr=True)
    with LiveLine(err, count="bytes") as live:
        src = prepare_source(spec, live.step)
        rt = prepare_rt_tree(src, b.arch, rt_patch, progress=live.step) if b else None
    if as_json:
        print(json.dumps({"source": src.to_dict(), "rt": rt.to_dict() if rt else None}, indent=1))
        return
    for note in src.notes + (rt.notes if rt else ()):
        err.print(f"note: {note}")
    console.print(f"{src.version} ({src.flavour} tree) from {src.spec}\n  id   {src.source_id}\n  tree {src.path}")
    if b and rt:
        console.print(f"  RT   {b.name} ({b.arch}): {rt.support.reason}; enable CONFIG_{rt.support.symbol}")
        if rt.patch:
            console.print(f"  patch {rt.patch_id}\n  patched tree {rt.path}")


@kernel_app.command()
def build(
    board: str = typer.Option(..., "--board", "-b", help="board name (rtforge kernel boards)"),
    source: str | None = typer.Option(None, "--source", "-s", help=SPEC_RICH + " (default: the board's)"),
    rt_patch: str | None = typer.Option(
        None, "--rt-patch", help="PATH|URL|auto: an RT patch or series, when the tree needs one"
    ),
    fragments: str = typer.Option(
        "latency", "--fragments", help="rtforge fragments on top of rt: latency, tracing (comma-separated, or none)"
    ),
    user_fragment: list[Path] = typer.Option([], "-k", "--fragment", help="your own .config fragment (repeatable)"),
    option: list[str] = typer.Option([], "-K", "--option", help="one option, e.g. CONFIG_NO_HZ_FULL=y (repeatable)"),
    allow_dropped: bool = typer.Option(
        False, "--allow-dropped", help="build even when Kconfig dropped requested options"
    ),
    jobs: int = typer.Option(0, "--jobs", "-j", help="parallel jobs (default: all CPUs)"),
    dist: Path = typer.Option(Path("dist"), "--dist", help="where packages go"),
    no_debs: bool = typer.Option(False, "--no-debs", help="skip Kbuild's bindeb-pkg (and so the headers package)"),
    match: str | None = typer.Option(
        None, "--match", metavar="HOST",
        help="start from the kernel HOST runs ('local': this machine): its source and its .config, plus RT; "
             "every option that differs is reported with why"),
    sysroot: Path | None = typer.Option(
        None, "--sysroot", metavar="DIR", help="with --match: read HOST's files below DIR (a copy of a board's "
                                               "/proc, /boot and /var/lib/dpkg)"),
    ssh_config: Path | None = typer.Option(None, "--ssh-config", help="ssh config file (ssh -F) for --match"),
    config_only: bool = typer.Option(False, "--config-only", help="configure and report, compile nothing"),
    defconfig: str | None = typer.Option(
        None, "--defconfig", metavar="TARGET",
        help="start from this instead of the board's defconfig: a file of arch/<arch>/configs/ or a Kconfig "
             "target (allnoconfig, tinyconfig: a lean kernel, with -k for what it needs); the board's own "
             "fragment still applies"),
) -> None:
    """Fetch the source, enable PREEMPT_RT (patching if needed), verify the .config, build with Kbuild, package."""
    names = [f.strip() for f in fragments.split(",") if f.strip() and f.strip() != "none"]
    if sysroot is not None and match is None:
        raise UserError("--sysroot reads a board's files for --match: give --match HOST too")
    if defconfig is not None:  # before --match reads a board
        check_defconfig_name(defconfig, match is not None)
    err = Console(stderr=True)
    running = _read_match(match, sysroot, ssh_config, err) if match else None
    spec = BuildSpec(
        board=board,
        source=source,
        rt_patch=rt_patch,
        fragments=names,
        user_fragments=list(user_fragment),
        options=list(option),
        allow_dropped=allow_dropped,
        jobs=jobs,
        dist=dist,
        debs=not no_debs,
        match=running,
        match_host=match,
        config_only=config_only,
        defconfig=defconfig,
    )
    with LiveLine(err, count="bytes") as live:
        result = build_kernel(spec, lambda what, done, total: _build_step(live, what, done, total))
    console = make_console()
    for note in result.notes:
        err.print(f"note: {note}", highlight=False)
    for m in result.config.dropped:
        err.print(f"[yellow]warning:[/yellow] {m.sentence()}", highlight=False)
    if result.match is not None:
        _print_match(console, result)
    if result.dist is None:
        console.print(f"configured, nothing compiled (--config-only): {result.config_path}", highlight=False)
        return
    done = f"{result.objects} objects compiled" if result.objects else "nothing to compile"
    console.print(f"{result.release} for {result.board.name} ({done}): {result.dist}", highlight=False)
    headers = open_bundle(result.dist).manifest.get("headers") or {}
    if headers.get("deb"):
        console.print(f"headers for DKMS: bundle/{headers['deb']}", highlight=False)
    elif headers.get("why"):
        console.print(f"no headers for DKMS: {headers['why']}", highlight=False)
    console.print(f"next: rtforge kernel boot-test {result.dist}   (then rtforge deploy HOST {result.dist})")


def _build_step(live: LiveLine, what: str, done: int | None, total: int | None) -> None:
    """The line counts bytes (downloads, extraction); compiling counts objects,
    so its count goes into the words rather than be shown as megabytes."""
    if what == "compiling" and total:
        if live.what != what:
            live.step(what, None, None)             # a new step: its own elapsed time
        live.update(f"compiling: {done} of ~{total} objects")
    else:
        live.step(what, done, total)


def _read_match(host: str, sysroot: Path | None, ssh_config: Path | None, err: Console):
    local = host in ("local", "localhost")
    t = LocalTransport() if local else SshTransport(host, ssh_config=ssh_config)
    try:
        root = ""
        if sysroot is not None:
            root = str(resolved(sysroot, f"--sysroot {sysroot}")) if local else str(sysroot)
            if t.run(["test", "-d", root]).returncode != 0:
                raise UserError(f"--sysroot {sysroot} is not a directory on {t.name}: give the folder that holds "
                                "the board's proc/, boot/ and var/lib/dpkg/")
        err.print(f"reading the running kernel of {'this machine' if local else host}", highlight=False)
        return read_running(t, root, host="this machine" if local else host)
    finally:
        t.close()


def _print_match(console, result: BuildResult) -> None:
    """What was matched, what was used instead, and every option that differs."""
    plan, k = result.match, result.config
    assert plan is not None   # only a --match build is printed this way
    console.print(f"matched: {plan.spec} ({plan.how})" + ("" if plan.exact else "; not an exact match"),
                  highlight=False, markup=False)
    console.print(f"configuration: from {k.base}", highlight=False, markup=False)
    for line in plan.instead:
        console.print(f"  instead: {line}", highlight=False, markup=False)
    console.print(f"{len(result.changes)} options differ from the running kernel's:", highlight=False)
    for line in report_lines(result.changes):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


@kernel_app.command()
def verify(bundle: Path = typer.Argument(..., help="a bundle directory, dist directory or tarball")) -> None:
    """Re-check the sha256 of every file of a bundle against its manifest."""
    b = open_bundle(bundle)
    try:
        b.verify()
        make_console().print(f"{len(b.files)} files match their sha256: {b.release} for {b.board}; manifest "
                             f"sha256 {b.manifest_sha256}", highlight=False)
    finally:
        b.close()


@kernel_app.command("boot-test")
def boot_test_cmd(
    bundle: Path = typer.Argument(..., help="a bundle from rtforge kernel build"),
    machine: str | None = typer.Option(
        None, "--machine", "-M", help="only this QEMU machine (default: every one the board names)"
    ),
    timeout: str = typer.Option("5m", "--timeout", metavar="DURATION",
                                help="how long to wait for the kernel to boot and report (5m)"),
    probe_s: int = typer.Option(3, "--probe-s", help="seconds of probe run inside QEMU"),
    module: list[Path] = typer.Option([], "--module", metavar="FILE.ko",
                                      help="load this module in the guest (repeatable): e.g. one built against "
                                           "the bundle's headers"),
    results_dir: Path | None = RESULTS_DIR,
) -> int:
    """Boot the kernel on each emulated machine of its board: passes only if it runs as PREEMPT_RT; the
    probe's run is stored as emulated."""
    timeout_s = parse_timeout_s(timeout)
    if not 1 <= probe_s <= 3600:
        raise UserError("--probe-s is 1 to 3600 seconds")
    b = open_bundle(bundle)
    err = Console(stderr=True)
    try:
        b.verify()
        with LiveLine(err) as live:
            results = boot_test(
                b,
                Store(results_dir),
                machine=machine,
                timeout_s=timeout_s,
                probe_s=probe_s,
                progress=lambda m, s, line: live.step(f"booting on QEMU {m} ({s:.0f} s): {line[:60]}", None, None),
                modules=list(module),
            )
    finally:
        b.close()
    console = make_console()
    for r in results:
        mark = "[green]passed:[/green] " if r.passed else "[red]failed:[/red] "
        console.print(f"{mark}{r.machine}: {r.sentence}", highlight=False)
        if r.stand_in:
            console.print(
                f"  note: no QEMU machine emulates this board; {r.machine} is the closest honest check", highlight=False
            )
        for word, gap in r.quirks.items():  # an emulated boot differs from a Pi's by these: say so
            console.print(f"  quirk {word}: {gap}", highlight=False, markup=False)
        console.print(f"  console log: {r.console_log}", highlight=False)
        if r.run_id:
            console.print(f"  probe run stored as {r.run_id} (emulated: its latencies are QEMU noise)", highlight=False)
    return 0 if all(r.passed for r in results) else 1
