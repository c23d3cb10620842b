"""rtforge doctor: what hurts latency on this machine or a board, each with its fix."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import typer
from rich.text import Text

from ..device import board_host
from ..device.doctor.diagnose import DEFAULT_WINDOW_S, DoctorReport, diagnose
from ..device.doctor.findings import SEVERITIES, SEVERITY_WORDS, severity_counts
from ..device.transport.device import Device
from ..errors import UserError
from ..paths import resolved
from ..results.display import clean
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


NBSP = "\u00a0"   # between a number and its unit: "1 %" is never split across lines


def _say(c, text: str, first: str = "", rest: str = "", styles: tuple[tuple[int, int, str], ...] = ()) -> None:
    """One paragraph of the report wrapped to the terminal with a hanging
    indent ('    why: ' and its lines under the text, never at column 0);
    textwrap breaks only at ASCII spaces, so NBSP holds a number to its
    unit.  styles: (start, end, style) of the first line's words."""
    lines = textwrap.wrap(text, max(c.width, 40), initial_indent=first, subsequent_indent=rest,
                          break_long_words=False, break_on_hyphens=False) or [first]
    out = Text("\n".join(lines))
    for a, b, style in styles:
        out.stylize(style, a, b)
    c.print(out, soft_wrap=True, highlight=False)


def render(r: DoctorReport) -> None:
    c = make_console()
    iso = ",".join(map(str, r.isolated)) or "none"
    head = (f"rtforge doctor: {r.target} · {r.model or 'no device-tree model'} · kernel {r.kernel_release} "
            f"({r.preempt} preemption) · RT CPUs: {iso}")
    _say(c, clean(head), rest="    ", styles=((0, len("rtforge doctor"), "bold"),))
    _say(c, severity_counts({s: r.count(s) for s in SEVERITIES})
         + (f" · {len(r.fixed)} fixed by rtforge tune" if r.fixed else ""))
    for f in r.findings:
        c.print()
        word = SEVERITY_WORDS[f.severity].upper()
        _say(c, f"{word}  {clean(f.id)}  {clean(f.title)}", rest="    ",
             styles=((0, len(word), _STYLE[f.severity]), (len(word) + 2, len(word) + 2 + len(f.id), "bold")))
        _say(c, clean(f.why), "    why: ", " " * 9)
        for e in f.evidence[:SHOWN_EVIDENCE]:
            first, *more = e.value.split("\n") or [""]   # a file's lines each on a line of their own
            _say(c, f"{clean(e.source)} = {clean(first)}", "    ", " " * 6)
            for line in more:
                _say(c, clean(line), " " * 6, " " * 6)
        if len(f.evidence) > SHOWN_EVIDENCE:
            _say(c, f"... {len(f.evidence) - SHOWN_EVIDENCE} more (--json shows all)", "    ")
        _say(c, clean(f.fix), "    fix: ", " " * 9)
    for x in r.fixed:
        c.print()
        settings = "; ".join(x.settings[:4]) + (f"; ... {len(x.settings) - 4} more" if len(x.settings) > 4 else "")
        _say(c, f"FIXED  {clean(x.id)}  by rtforge tune ({x.operation}): {clean(settings)}", rest="    ",
             styles=((0, 5, "green"), (7, 7 + len(x.id), "bold")))
    if r.threads:
        busiest = ", ".join(f"{clean(t.comm)} {t.share_pct:.0f}{NBSP}%" for t in r.threads[:4])
        c.print()
        _say(c, f"busiest threads over {r.window_s:g}{NBSP}s (% of one CPU): {busiest}", rest="    ")
    if not r.findings:
        c.print("\nnothing found that hurts latency", highlight=False)
