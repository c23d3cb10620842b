"""python -m rtforge, and the `rtforge` command.

The entry point is here, not in rtforge.cli: importing the command line
(typer, rich, every command) takes a few tenths of a second, and a Ctrl-C
in that time must end with the one line every interrupt gets, not a
traceback from an import.  The import runs with SIGINT noted rather than
raised: a KeyboardInterrupt inside importlib's own machinery (a module
lock's callback) is printed by the interpreter as "Exception ignored ...
Traceback", which no except clause here could catch.
"""

import signal
import sys


def entry() -> None:
    interrupted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        from .cli import run
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        print("rtforge: interrupted", file=sys.stderr)
        sys.exit(130)
    run()


if __name__ == "__main__":
    entry()
