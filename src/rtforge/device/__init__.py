"""Where commands run: this machine (LocalTransport) or a board over SSH
(SshTransport); what is on a target's boot partition (bootcfg)."""

from .ssh import SshTransport
from .transport import CommandFailed, ConnectionLost, LocalTransport, Transport

__all__ = ["CommandFailed", "ConnectionLost", "LocalTransport", "SshTransport", "Transport"]
