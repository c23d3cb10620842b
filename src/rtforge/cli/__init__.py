"""The command line: parse, call the library, display; exit codes live here.

    0 success · 1 internal error (traceback: a bug) · 2 bad input or missing
    prerequisite (one sentence) · 130 interrupted (what was measured is kept)

Messages are printed through ``clean``: a path or a label holding terminal
escape sequences is shown, never obeyed.  Warnings from the library (the
store rebuilding its index, say) come through the "rtforge" logger.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import logging
import os
import re
import signal
import sys
import threading

import click
import typer
from typer.core import TyperGroup

from .. import __version__
from ..errors import UserError

# --help lists the commands in the order of a user's journey, in panels:
# panel -> {command: the module of rtforge.cli that defines it}.
JOURNEY = {
    "Measure": {"latency": "latency", "attach": "latency", "fetch": "remote", "import": "importcmd", "runs": "runs",
                "show": "runs", "label": "runs", "delete": "runs", "bench": "bench"},
    "Evidence": {"compare": "report", "plot": "report", "report": "report"},
    "Kernels": {"kernel": "kernel"},
    "Install": {"deploy": "device", "kernels": "device", "rollback": "device", "target": "device",
                "bootcheck": "bootcheck"},
    "Diagnose": {"doctor": "doctor", "tune": "tune"},
    "Fleet": {"fleet": "fleet"},
    "Monitor": {"monitor": "monitor", "trend": "monitor"},
}
COMMANDS = {name: module for names in JOURNEY.values() for name, module in names.items()}
PANELS = {name: panel for panel, names in JOURNEY.items() for name in names}


class LazyGroup(TyperGroup):
    """The top-level command group: a command's module is imported when that
    command runs, not before -- `rtforge latency` loads neither the kernel
    builder nor matplotlib, which matters when a fleet starts one rtforge
    per board.  Each module of rtforge.cli defines its commands on an `app` of
    its own."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        try:
            return click.Group.resolve_command(self, ctx, args)
        except click.UsageError as e:  # typer suggests from loaded commands only: none are, yet
            close = difflib.get_close_matches(args[0], list(COMMANDS)) if args else []
            if close and "Did you mean" not in e.message:
                raise click.UsageError(f"{e.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in close)}?",
                                       e.ctx) from None
            raise

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        if name not in _BUILT:   # typer builds click's objects from the signatures: once per process
            module = importlib.import_module(f"{__name__}.{COMMANDS[name]}")
            cmd: click.Command | None = typer.main.get_command(module.app)
            if isinstance(cmd, click.Group):
                cmd = cmd.get_command(ctx, name)
            if cmd is not None:
                cmd.rich_help_panel = PANELS[name]  # type: ignore[attr-defined]
            _BUILT[name] = cmd
        return _BUILT[name]


_BUILT: dict[str, click.Command | None] = {}


app = typer.Typer(
    name="rtforge",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Build, install and prove a PREEMPT_RT Linux for the Raspberry Pi.\n\n"
         "HOST is a board reached over SSH: USER@HOST, HOST, or a Host alias of your ssh config "
         "(--ssh-config FILE for another one); leave it out to work on this machine.",
)


def _version(value: bool) -> None:
    if value:
        print(f"rtforge {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                          help="print rtforge's version and exit")) -> None:
    """Build, install and prove a PREEMPT_RT Linux for the Raspberry Pi."""


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


class _StderrWarnings(logging.Handler):
    """'rtforge: warning: ...' on whatever sys.stderr is now (tests swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        from .render import clean
        try:
            print(f"rtforge: warning: {clean(record.getMessage())}", file=sys.stderr)
        except Exception:  # a warning must never end a command
            pass


def _warnings_to_stderr() -> None:
    log = logging.getLogger("rtforge")
    if not any(isinstance(h, _StderrWarnings) for h in log.handlers):
        log.addHandler(_StderrWarnings(logging.WARNING))
        log.propagate = False


def _error(message: str) -> None:
    from .render import clean
    print(f"rtforge: error: {clean(message)}", file=sys.stderr)


@functools.cache
def root_command() -> click.Command:
    return typer.main.get_command(app)


def prepare(names: tuple[str, ...]) -> None:
    """Import and build these commands now (rtforge fleet's fork server, before it forks)."""
    group = root_command()
    with click.Context(group) as ctx:
        for name in names:
            group.get_command(ctx, name)   # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    """Run rtforge in-process and return its exit status (tests call this)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    _warnings_to_stderr()
    command = root_command()
    args = sys.argv[1:] if argv is None else argv
    try:
        _check_folder_options(args)
        rv = command.main(args=args, prog_name="rtforge", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except click.exceptions.NoArgsIsHelpError:
        return 0  # `rtforge` (or `rtforge kernel`) alone: the help was asked for, and printed
    except UserError as e:
        _error(str(e))
        return UserError.exit_code
    except click.UsageError as e:
        where = f" (see `{e.ctx.command_path} --help`)" if e.ctx else ""
        # click and typer each add "Did you mean ...?" to an unknown command: say it once
        message = re.sub(r"( Did you mean [^?]*\?)(?:\1)+", r"\1", e.format_message())
        _error(f"{message}{where}")
        return 2
    except click.ClickException as e:
        _error(e.format_message())
        return e.exit_code
    except OSError as e:
        # The machine said no (a full disk, an I/O error, a vanished folder)
        # somewhere not yet turned into a UserError: still one sentence.
        from ..paths import os_error_sentence
        where = e.filename if e.filename is not None else "finish"
        _error(os_error_sentence(where, e, "use"))
        return 2
    except click.Abort as e:
        if isinstance(e.__context__, EOFError):  # click turns any EOFError into Abort
            _error(f"the data ended too early ({e.__context__ or 'end of file'}): a file is cut off or damaged")
            return 2
        print("rtforge: interrupted", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("rtforge: interrupted", file=sys.stderr)
        return 130


# Options that name a folder or a file: an empty value would become "." (the
# current folder) on its way through click, and rtforge would write there.
PATH_OPTIONS = ("--results-dir", "--state-dir", "--textfile-dir", "--ssh-config", "--sysroot", "--output", "-o")


def _check_folder_options(args: list[str]) -> None:
    for i, a in enumerate(args):
        if a == "--":
            return
        name, eq, value = a.partition("=")
        if (eq and name in PATH_OPTIONS and not value.strip()) or \
                (a in PATH_OPTIONS and i + 1 < len(args) and not args[i + 1].strip()):
            raise UserError(f"{name} was given an empty name: name the file or folder (an unset shell "
                            "variable in the command?)")


def _usable_streams() -> bool:
    """stdout and stderr that can take any text: closed ones (`rtforge runs >&-`)
    are an error said once, an encoding without µ or box lines
    (PYTHONIOENCODING=ascii, LANG=C) writes escapes instead of failing."""
    if sys.stdout is None:
        if sys.stderr is not None:
            print("rtforge: error: standard output is closed, so nothing could be shown: run the command with its "
                  "output going somewhere", file=sys.stderr)
        return False
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
    return True


def run() -> None:
    """Console-script entry point."""
    if not _usable_streams():
        sys.exit(2)
    try:
        status = main()
    except KeyboardInterrupt:  # between main's own handlers (a second Ctrl-C while it reports the first)
        print("rtforge: interrupted", file=sys.stderr)
        status = 130
    try:
        sys.stdout.flush()
    except OSError:  # `rtforge runs | head -1`, or stdout on a full disk
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        status = status or 2
    sys.exit(status)
