"""A HOST argument, by one rule for every command: no HOST, 'local' or
'localhost' is this machine; anything else is a board over SSH (USER@HOST,
HOST or a Host alias of the user's ssh config)."""

from __future__ import annotations

from pathlib import Path

from .ssh import SshTransport
from .transport import LocalTransport, Transport

THIS_MACHINE = ("local", "localhost")


def board_host(host: str | None) -> str | None:
    """The board a HOST argument names; None for this machine."""
    return None if not host or host in THIS_MACHINE else host


def open_transport(host: str | None, ssh_config: Path | None = None) -> Transport:
    """This machine's transport, or an SSH one to the board HOST names."""
    board = board_host(host)
    return LocalTransport() if board is None else SshTransport(board, ssh_config=ssh_config)
