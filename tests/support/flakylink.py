"""SIMULATION of a link (or a disk) that damages bytes in transit: the one
failure an upload check exists for, which a healthy loopback never shows.

Everything else is real: the commands go through the real ssh client to the
loopback sshd.  Only data sent *to* the board is touched, and only where it
holds `needle`, which is replaced by bytes of the same length -- so a tar
stream stays a valid tar (tar checksums its headers, never the contents)
and only the file holding the needle arrives different.
"""

from __future__ import annotations

from rtforge.device import SshTransport


class FlakyLink(SshTransport):
    def __init__(self, *args, needle: bytes, **kw):
        super().__init__(*args, **kw)
        self.needle = needle
        self.damaged = 0

    def _exec(self, argv, *, input, timeout):
        if input and self.needle in input:
            self.damaged += 1
            input = input.replace(self.needle, bytes(b ^ 0x20 for b in self.needle))
        return super()._exec(argv, input=input, timeout=timeout)
