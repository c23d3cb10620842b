"""One way to run things on a target (DESIGN rule 2).

Commands are argv lists, never shell strings.  ``spawn`` starts a process in
its own session so that a terminal's Ctrl-C reaches only rtforge (which then
stops everything in order) and so that the process group can be killed as a
whole; it also asks the kernel to send SIGTERM if rtforge itself dies, so a
SIGKILLed rtforge leaves no load running.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Transport(ABC):
    name: str

    @abstractmethod
    def run(self, argv: list[str], *, input: str | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run to completion; stdout and stderr captured as text."""

    @abstractmethod
    def spawn(self, argv: list[str], *, log: Path | None = None) -> subprocess.Popen:
        """Start in its own session; output appended to log (or discarded)."""

    @abstractmethod
    def which(self, program: str) -> str | None:
        """Full path of program on the target, or None."""

    @abstractmethod
    def is_root(self) -> bool:
        """Whether commands run with root privileges."""


class LocalTransport(Transport):
    name = "local"

    def run(self, argv, *, input=None, timeout=None):
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)

    def spawn(self, argv, *, log=None):
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent,
            )
        finally:
            if log:
                out.close()

    def which(self, program):
        return shutil.which(program)

    def is_root(self):
        return os.geteuid() == 0
