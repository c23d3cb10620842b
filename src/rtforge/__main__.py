"""python -m rtforge, and the `rtforge` command.

The entry point is here, not in rtforge.cli: importing the command line
(typer, rich, every command) takes a few tenths of a second, and a Ctrl-C
in that time must end with the one line every interrupt gets, not a
traceback from an import.
"""

import sys


def entry() -> None:
    try:
        from .cli import run
    except KeyboardInterrupt:
        print("rtforge: interrupted", file=sys.stderr)
        sys.exit(130)
    run()


if __name__ == "__main__":
    entry()
