"""Reading a kernel's serial console: what went wrong in a boot that failed.

A boot test that only says "did not reach /init" sends the user hunting
through a log for the cause.  The kernel states it: the panic line, and
before it the oops with the faulting function ("PC is at f+0x.." on 32-bit
ARM, "pc : f+0x.." on arm64, "RIP: 0010:f+0x.." on x86), or "Attempted to
kill init! exitcode=0x.." when /init itself died (its wait status: 0x4 is
SIGILL, a program built for a CPU the machine does not have).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

PANIC = re.compile(r"Kernel panic - not syncing: ?(.*)")
# The first fault's function, per architecture's oops format.
FAULT = re.compile(r"(?:PC is at |\bpc : |RIP: [0-9a-f]{4}:)([A-Za-z_.$][\w.$]*)(?:\+0x[0-9a-f]+)?")
KILL_INIT = re.compile(r"Attempted to kill init! exitcode=(0x[0-9a-fA-F]+)")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class Diagnosis:
    kind: str                 # "panic", "silent" (nothing printed), "stalled" (printed, then nothing useful)
    line: str                 # the kernel's own line: the panic, or the last thing it printed
    function: str | None = None
    detail: str = ""          # what the evidence means, when it says more than the line

    def sentence(self) -> str:
        if self.kind == "silent":
            return "QEMU's serial console stayed empty: the kernel never started or printed elsewhere " \
                   "(an image for another machine, or a console= that is not this machine's UART)"
        if self.kind == "panic":
            where = f" in {self.function}" if self.function else ""
            return f"the kernel panicked{where}: {self.line}" + (f" ({self.detail})" if self.detail else "")
        return f"the kernel stopped making progress; its last line: {self.line!r}"


def clean_lines(text: str) -> list[str]:
    return [ANSI.sub("", line).rstrip("\r") for line in text.splitlines()]


def _init_death(code: int) -> str:
    """exitcode= is /init's wait status: low 7 bits the signal, else exit status << 8."""
    sig = code & 0x7F
    if sig:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        hint = (": its programs were built for a CPU this machine does not have" if name == "SIGILL" else "")
        return f"/init died of {name}{hint}"
    return f"/init exited with status {code >> 8}"


def diagnose(text: str) -> Diagnosis | None:
    """Why a boot did not finish, from its console; None when nothing is wrong
    that the console shows (the boot simply has not got further yet)."""
    lines = clean_lines(text)
    for i, line in enumerate(lines):
        m = PANIC.search(line)
        if not m:
            continue
        before = "\n".join(lines[max(0, i - 200):i + 1])
        fault = FAULT.search(before)
        detail = ""
        if k := KILL_INIT.search(line):
            detail = _init_death(int(k.group(1), 16))
        return Diagnosis("panic", m.group(0).strip(), fault.group(1) if fault else None, detail)
    return None


def explain_stop(text: str) -> Diagnosis:
    """Why a boot that ran out of time stopped: a panic, silence, or its last line."""
    found = diagnose(text)
    if found:
        return found
    printed = [line for line in clean_lines(text) if line.strip()]
    if not printed:
        return Diagnosis("silent", "")
    return Diagnosis("stalled", printed[-1].strip()[:200])
