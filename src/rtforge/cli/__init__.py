"""The command line: parse, call the library, display; exit codes live here.

    0 success · 1 internal error (traceback: a bug) · 2 bad input or missing
    prerequisite (one sentence) · 130 interrupted (what was measured is kept)
"""

from __future__ import annotations

import signal
import sys
import threading

import click
import typer

from ..errors import UserError

app = typer.Typer(
    name="rtforge",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Build, install and prove a PREEMPT_RT Linux for the Raspberry Pi.",
)

# Command groups register themselves on `app`.
from . import bench, bootcheck, importcmd, kernel, latency, remote, report, runs, target  # noqa: E402,F401


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def main(argv: list[str] | None = None) -> int:
    """Run rtforge in-process and return its exit status (tests call this)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="rtforge", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except UserError as e:
        print(f"rtforge: error: {e}", file=sys.stderr)
        return UserError.exit_code
    except click.UsageError as e:
        where = f" (see `{e.ctx.command_path} --help`)" if e.ctx else ""
        print(f"rtforge: error: {e.format_message()}{where}", file=sys.stderr)
        return 2
    except click.ClickException as e:
        print(f"rtforge: error: {e.format_message()}", file=sys.stderr)
        return e.exit_code
    except (click.Abort, KeyboardInterrupt):
        print("rtforge: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
