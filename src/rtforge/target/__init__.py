"""Where commands run: this machine (LocalTransport) or a board (SSH, later)."""

from .transport import LocalTransport, Transport

__all__ = ["LocalTransport", "Transport"]
