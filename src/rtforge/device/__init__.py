"""Where commands run and what rtforge does to a target, in rooms:

    transport/  how a machine is reached (local, SSH) and what it is (its facts)
    firmware/   the Raspberry Pi firmware model (config.txt, what boots)
    deploy/     try once at boot, then keep or fall back (kernels, command lines)
    state/      what the kernel shows now (/proc, /sys) and tune's record of it
    doctor/     what hurts latency, with evidence and fixes
    tune/       doctor's fixes applied reversibly

tests/unit/test_layers.py holds which room may import which.  Every other layer
reaches a machine through the transports exported here (open_transport: what
a HOST argument names, by one rule).
"""

from .transport.hosts import board_host, open_transport
from .transport.ssh import SshTransport
from .transport.transport import CommandFailed, ConnectionLost, LocalTransport, Transport

__all__ = ["CommandFailed", "ConnectionLost", "LocalTransport", "SshTransport", "Transport", "board_host",
           "open_transport"]
