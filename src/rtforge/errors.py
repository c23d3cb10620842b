"""The two kinds of failure (docs/architecture.md, rule 4).

``UserError`` is something the user can fix: the CLI prints its message as
one line and exits 2.  Anything else is a bug in rtforge and exits 1 with a
traceback.  Nothing below the CLI calls ``sys.exit``.
"""


class UserError(Exception):
    """Bad input or a missing prerequisite; the message says what to do."""

    exit_code = 2
