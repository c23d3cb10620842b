"""A kernel command line change on a Raspberry Pi, tried once like a kernel.

The try-once template does not care what is tried.  A command line that
hangs the kernel (a wrong isolcpus=, a console that does not exist, a typo in
root=) must fall back by itself as a bad kernel does, so `rtforge tune`
pushes it the same way:

  install  the new command line as cmdline-rtforge.txt next to the cmdline
           file the firmware reads now (under the os_prefix in effect)
  arm      tryboot.txt = config.txt + a "cmdline" block: cmdline=cmdline-rtforge.txt
  verify   this boot was the try, and /proc/cmdline holds every word asked for
  commit   config.txt gets the block; a kernel block stays as it is.

`rtforge tune --revert` tries the text from before the same way -- by
taking rtforge's block out of config.txt again when that makes the firmware
read exactly that text (config.txt then comes back byte for byte), else as
a file of rtforge's.

A GRUB board's command line goes the same way through a menu entry of
rtforge's own (grubcmdline.py).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Sequence

from ...errors import UserError
from ..firmware.bootcfg import BootChoice, resolve_text
from ..transport.device import Device
from ..transport.facts import DeviceFacts
from .pitry import PiPayload, PiTryboot, strip_block
from .steps import Steps
from .tryonce import DeployResult, Expect, try_once

FILE = "cmdline-rtforge.txt"
# The file in use is never rewritten: a second change goes to the other name
# (a failed try must leave the committed command line as it was).
FILES = (FILE, "cmdline-rtforge-b.txt")
_WORD_RE = re.compile(r"^[^\s\x00-\x1f\x7f]+$")


def edit_cmdline(current: str, add: list[str], remove: list[str]) -> str:
    """`current` without the parameters named in `remove` (by key: "isolcpus"
    removes "isolcpus=2,3") and without earlier values of the keys in `add`,
    then `add` appended: one line, as the firmware passes it."""
    drop = {w.split("=", 1)[0] for w in (*add, *remove)}
    kept = [w for w in current.split() if w.split("=", 1)[0] not in drop]
    return " ".join([*kept, *add])


class CmdlineChange(PiPayload):
    kind = "the new kernel command line"
    block_tag = "cmdline"

    def __init__(self, add: Sequence[str], remove: Sequence[str] = (), *, replace: bool = False):
        super().__init__()
        # replace: `add` is the whole new command line (rtforge tune --revert
        # restores the exact text from before, word order included)
        self.replace = replace
        self.strip = False      # replace: the text comes back by taking rtforge's block out (install decides)
        bad = [w for w in (*add, *remove) if not _WORD_RE.match(w)]
        if bad or not (add or remove):
            raise UserError(f"{bad[0]!r} is not one kernel parameter: give words like isolcpus=2,3 "
                            "(no spaces, no control characters)" if bad else "nothing to change: give parameters")
        self.add, self.remove = list(add), list(remove)
        self.expect = Expect(what="the new kernel command line", cmdline_has=tuple(add))

    def check(self, target: Device, f: DeviceFacts) -> None:
        keys = {w.split("=", 1)[0] for w in f.cmdline.split()}
        if not self.add and not any(w.split("=", 1)[0] in keys for w in self.remove):
            raise UserError(f"{target.name}'s kernel command line has none of {' '.join(self.remove)}: nothing to do")

    def path(self) -> str:
        """Where the new file goes: next to the cmdline file read now, under
        a name that is not the one read now."""
        current = self.mech.before.cmdline_file or self.mech.before.os_prefix + "cmdline.txt"
        name = FILES[1] if posixpath.basename(current) == FILES[0] else FILES[0]
        return posixpath.join(posixpath.dirname(current), name)

    def install(self, steps: Steps) -> None:
        before = self.mech.before
        if before.cmdline is None:
            raise UserError(f"{self.mech.name} has no command line file that the firmware reads: "
                            "run `rtforge bootcheck` on its boot partition")
        self.text = " ".join(self.add) if self.replace else edit_cmdline(before.cmdline, self.add, self.remove)
        if self.replace:
            # The exact text from before is usually the file rtforge never
            # touched (cmdline.txt): then config.txt loses rtforge's block and
            # comes back byte for byte; else a file of rtforge's holds the text.
            mech = self.mech
            stripped = strip_block(mech.old_config.decode("utf-8", "replace"), self.block_tag)
            self.strip = resolve_text(stripped, mech.files(), mech.model, tryboot=True).cmdline == self.text
            if self.strip:
                return
        path, t = self.mech.boot(self.path()), self.mech.target.t
        steps.run("install the command line", lambda: t.write_bytes(path, (self.text + "\n").encode(), sudo=True,
                                                                     step="install the command line"),
                  lambda: self.mech.sh('rm -f "$1"', path, step="cleanup"))

    def block_lines(self) -> list[str] | None:
        if self.strip:
            return None
        # cmdline= is read under os_prefix like the other OS files (Boot options, os_prefix)
        return [f"cmdline={self.path()[len(self.mech.before.os_prefix):]}"]

    def block_label(self) -> str:
        if self.replace:
            return "restored"
        return " ".join(self.add) or "removed " + " ".join(self.remove)

    def wrong_choice(self, choice: BootChoice) -> str | None:
        if (not self.strip and choice.cmdline_file != self.path()) or choice.cmdline != self.text:
            return f"the firmware would read the command line from {choice.cmdline_file}: {choice.cmdline!r}"
        return None

    def removed(self) -> str:
        return "nothing was installed" if self.strip else f"{posixpath.basename(self.path())} was removed"

    def tidy(self) -> None:
        old = self.mech.before.cmdline_file
        if old and posixpath.basename(old) in FILES:  # the previous change, replaced now
            self.mech.sh('rm -f "$1"', self.mech.boot(old), step="tidy up")


def tune_cmdline(target: Device, add: Sequence[str], remove: Sequence[str] = (), *, replace: bool = False,
                 timeout_s: float = 300,
                 on_step: Callable[[str], None] | None = None,
                 on_wait: Callable[[float], None] | None = None) -> DeployResult:
    """Try a changed kernel command line once on a Raspberry Pi; keep it when it verifies.
    replace=True: `add` is the whole command line to try (remove is ignored)."""
    return try_once(PiTryboot(target, CmdlineChange(add, remove, replace=replace), timeout_s=timeout_s, on_step=on_step,
                              on_wait=on_wait))
