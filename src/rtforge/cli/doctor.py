"""rtforge doctor: what hurts latency on this machine or a board, each with its fix."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from ..device import board_host
from ..device.doctor.diagnose import DEFAULT_WINDOW_S, DoctorReport, diagnose
from ..device.doctor.findings import SEVERITY_WORDS
from ..device.transport.device import Device
from ..errors import UserError
from ..paths import resolved
from .device import HOST_HELP, SSH_CONFIG, open_board
from .render import make_console

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


SHOWN_EVIDENCE = 6
_STYLE = {"blocks-rt": "bold red", "costs-latency": "yellow", "note": "dim"}

SYSROOT = typer.Option(None, "--sysroot", metavar="DIR",
                       help="read /proc and /sys below DIR on the target (a fixture tree, a mounted image)")


def board_for(host: str | None, ssh_config: Path | None, sysroot: Path | None) -> Device:
    """The target, rooted at --sysroot when given (checked on the target)."""
    board = open_board(host, ssh_config)
    if sysroot is not None:
        try:
            root = str(resolved(sysroot, f"--sysroot {sysroot}")) if board.t.name == "this machine" else str(sysroot)
        except UserError:
            board.t.close()
            raise
        if board.t.run(["test", "-d", root]).returncode != 0:
            board.t.close()
            raise UserError(f"--sysroot {sysroot} is not a directory on {board.name}: give the folder that holds "
                            "proc/ and sys/")
        # without either, every reading would be "(not there)" and the findings claims about nothing
        if board.t.run(["sh", "-c", 'test -d "$1/proc" || test -d "$1/sys"', "sh", root]).returncode != 0:
            board.t.close()
            raise UserError(f"--sysroot {sysroot} holds neither proc/ nor sys/ on {board.name}: give the folder "
                            "that holds them (a fixture tree, a mounted image's root)")
        board = Device(board.t, root=root)
    return board


def host_arg(host: str | None) -> str:
    """How a fix names this target in an rtforge command ("" for this machine)."""
    return "" if board_host(host) is None else f"{host} "


@app.command()
def doctor(
    host: str | None = typer.Argument(None, help=HOST_HELP),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    window_s: float = typer.Option(DEFAULT_WINDOW_S, "--window-s",
                                   help="seconds over which threads' CPU use is measured (0: skip)"),
    isolate: str | None = typer.Option(None, "--isolate", metavar="CPUS",
                                          help="CPUs meant for RT work, checked like isolated ones (default: those "
                                               "isolated at boot or by rtforge tune)"),
    sysroot: Path | None = SYSROOT,
    ssh_config: Path | None = SSH_CONFIG,
) -> int:
    """What hurts latency here: each finding with its severity, the evidence read and the exact fix.
    A report: the exit status is 0 whatever it finds."""
    board = board_for(host, ssh_config, sysroot)
    try:
        report = diagnose(board, window_s=window_s, isolate=isolate, host_arg=host_arg(host))
    finally:
        board.t.close()
    if as_json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        render(report)
    return 0


def render(r: DoctorReport) -> None:
    c = make_console()
    iso = ",".join(map(str, r.isolated)) or "none"
    c.print(f"[bold]rtforge doctor[/bold]: {escape(r.target)} · {escape(r.model or 'no device-tree model')} · kernel "
            f"{escape(r.kernel_release)} ({r.preempt} preemption) · RT CPUs: {iso}", highlight=False)
    counts = [f"{r.count(s)} {SEVERITY_WORDS[s]}" for s in ("blocks-rt", "costs-latency", "note")]
    c.print(" · ".join(counts) + (f" · {len(r.fixed)} fixed by rtforge tune" if r.fixed else ""), highlight=False)
    for f in r.findings:
        c.print()
        c.print(f"[{_STYLE[f.severity]}]{SEVERITY_WORDS[f.severity].upper()}[/]  [bold]{f.id}[/bold]  "
                f"{escape(f.title)}", highlight=False)
        c.print(f"    why: {escape(f.why)}", highlight=False)
        for e in f.evidence[:SHOWN_EVIDENCE]:
            c.print(f"    {escape(e.source)} = {escape(e.value)}", highlight=False)
        if len(f.evidence) > SHOWN_EVIDENCE:
            c.print(f"    ... {len(f.evidence) - SHOWN_EVIDENCE} more (--json shows all)", highlight=False)
        c.print(f"    fix: {escape(f.fix)}", highlight=False)
    for x in r.fixed:
        c.print()
        c.print(
            f"[green]FIXED[/green]  [bold]{x.id}[/bold]  by rtforge tune ({x.operation}): "
            + escape("; ".join(x.settings[:4]) + (f"; ... {len(x.settings) - 4} more" if len(x.settings) > 4 else "")),
            highlight=False,
        )
    if r.threads:
        busiest = ", ".join(f"{escape(t.comm)} {t.share_pct:.0f} %" for t in r.threads[:4])
        c.print()
        c.print(f"busiest threads over {r.window_s:g} s (% of one CPU): {busiest}", highlight=False)
    if not r.findings:
        c.print("\nnothing found that hurts latency", highlight=False)
