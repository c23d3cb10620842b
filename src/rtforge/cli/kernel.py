"""rtforge kernel …: boards, sources and RT enablement (build, verify and
boot-test register here too)."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress as Bar, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..kernel.boards import FLAVOURS, get_board, load_boards
from ..kernel.rtpatch import prepare_rt_tree
from ..kernel.sources import SPEC_HELP, prepare_source
from . import app
from .render import make_console

kernel_app = typer.Typer(no_args_is_help=True, help="Build PREEMPT_RT kernels for Raspberry Pis and other boards.")
app.add_typer(kernel_app, name="kernel")


class StepProgress:
    """One transient line per step ('extracting …', 'downloading …') with a
    bar when the size is known; nothing when stderr is not a terminal."""

    def __init__(self, console: Console):
        self.bar = Bar(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                       console=console, transient=True, disable=not console.is_terminal)
        self.task = None
        self.what = None

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def __call__(self, what: str, done: int | None, total: int | None) -> None:
        if what != self.what:
            if self.task is not None:
                self.bar.remove_task(self.task)
            self.task = self.bar.add_task(what, total=total)
            self.what = what
        self.bar.update(self.task, completed=done or 0, total=total)


@kernel_app.command()
def boards(as_json: bool = typer.Option(False, "--json", help="every field of every board as JSON")) -> None:
    """Every supported board: architecture, defconfig per source flavour, image name."""
    all_boards = load_boards()
    if as_json:
        print(json.dumps([b.to_dict() for b in all_boards.values()], indent=1))
        return
    t = Table(show_edge=False, header_style="bold")
    for col in ("board", "arch", "defconfig (raspberrypi tree)", "defconfig (mainline)", "image on the board",
                "QEMU", "what"):
        t.add_column(col)
    for b in all_boards.values():
        names = b.name + (f" ({', '.join(b.aliases)})" if b.aliases else "")
        t.add_row(names, b.arch, *(b.defconfig.get(f, "–") for f in FLAVOURS), b.image_name,
                  b.qemu.machine if b.qemu else "–", b.description)
    make_console().print(t)


@kernel_app.command(help="Fetch (or reuse) a kernel source tree; with --board, prove PREEMPT_RT can be enabled "
                         "in it (with --rt-patch: by patching a copy).  SPEC: " + SPEC_HELP.replace("[", "\\[") + ".")
def source(
    spec: str = typer.Argument(..., help=SPEC_HELP),
    board: Optional[str] = typer.Option(None, "--board", "-b", help="check RT enablement for this board's arch"),
    rt_patch: Optional[str] = typer.Option(None, "--rt-patch", help="PATH|URL|auto: an RT patch or series"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    b = get_board(board) if board else None
    console = make_console()
    err = Console(stderr=True)
    with StepProgress(err) as progress:
        src = prepare_source(spec, progress)
        rt = prepare_rt_tree(src, b.arch, rt_patch, progress=progress) if b else None
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
