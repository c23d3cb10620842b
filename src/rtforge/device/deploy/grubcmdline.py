"""A kernel command line change on a GRUB board, tried once like a kernel
(tryonce.py), as trycmdline.py does it on a Raspberry Pi.

GRUB has no one-shot command line, only a one-shot entry (grub-reboot), so
the try is a menu entry of rtforge's own:

  arm      TRY_SCRIPT, an /etc/grub.d script (like 40_custom) printing a copy
           of the running kernel's entry from grub.cfg -- same image, initrd
           and root -- with the new command line plus MARKER=<nonce>;
           update-grub puts it into grub.cfg; grub-reboot TRY_ID: the next
           boot only (GRUB_DEFAULT=saved).  Undone as one step.
  verify   /proc/cmdline holds this try's marker (the boot was the try) and
           every word asked for
  commit   the words go into DROPIN, a drop-in of rtforge's own that
           grub-mkconfig reads after /etc/default/grub (the default
           entries' command line); the try entry goes; update-grub.

A command line that panics the kernel (with panic=N, a board's watchdog, as
for a kernel try) reboots into GRUB's saved default, which never had the
words; one that hangs it needs a reset, after which the default boots.  The
marker is a dotted word, which the kernel keeps in /proc/cmdline and passes
to no one (an unknown module's parameter).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from ...errors import UserError
from ..transport.device import Device
from ..transport.facts import DeviceFacts
from .grubtry import GrubTry, grub_entries
from .steps import Steps
from .trycmdline import edit_cmdline
from .tryonce import DeployResult, Expect, Payload, try_once

DROPIN = "/etc/default/grub.d/rtforge-tune.cfg"
TRY_SCRIPT = "/etc/grub.d/42_rtforge_try"
TRY_ID = "rtforge-cmdline-try"
# short: GRUB prints "Booting `TITLE'" on an 80-column console, wrapped when longer
TRY_TITLE = "rtforge tune: try once"
MARKER = "rtforge.try"
_SHELL_SPECIAL = set('"$`\\')     # the drop-in is shell: a word must stay one literal word inside "..."
_SAFE = re.compile(r"^[^\s\"'$`\\{};#\x00-\x1f\x7f]+$")   # one literal word in grub.cfg and in a shell "..."


def dropin_text(words: list[str]) -> str:
    """The GRUB drop-in adding `words` to the default entries' command line."""
    bad = [w for w in words if set(w) & _SHELL_SPECIAL or not w.strip() or len(w.split()) != 1]
    if bad:
        raise UserError(f"{bad[0]!r} cannot go into a GRUB drop-in: give kernel parameters without spaces, "
                        'quotes, $, ` or \\')
    return ("# written by rtforge tune; rtforge tune --revert removes it (then update-grub)\n"
            f'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT {" ".join(words)}"\n')


def dropin_words(text: str | None) -> list[str]:
    """The words a drop-in of dropin_text's shape adds (none for anything else)."""
    m = re.search(r'^GRUB_CMDLINE_LINUX_DEFAULT="\$GRUB_CMDLINE_LINUX_DEFAULT ([^"$`\\]*)"$', text or "", re.M)
    return m[1].split() if m else []


def _update_grub(board: Device) -> str | None:
    """Run update-grub; None when it worked, else why not (its last error line)."""
    r = board.update_grub()
    return (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1] if r.returncode else None


def read_dropin(board: Device) -> str | None:
    data = board.t.read_optional(board.path(DROPIN), sudo=True, step="reading GRUB's drop-in")
    return data.decode(errors="replace") if data is not None else None


def put_dropin(board: Device, text: str | None) -> None:
    """Write (None: remove) the drop-in, then update-grub; the drop-in is undone when update-grub fails."""
    t, path = board.t, board.path(DROPIN)
    old = read_dropin(board)

    def put(value):
        if value is None:
            t.run(["rm", "-f", "--", path], sudo=True, check=True, step=f"removing {DROPIN}")
        else:
            t.run(["mkdir", "-p", "--", path.rsplit("/", 1)[0]], sudo=True, check=True, step="creating grub.d")
            t.write_bytes(path, value.encode(), sudo=True, step=f"writing {DROPIN}")
    put(text)
    why = _update_grub(board)
    if why:
        put(old)
        board.update_grub()
        raise UserError(f"update-grub failed on {board.name} ({why}), so {DROPIN} was put back as it was: "
                        "fix /etc/default/grub and try again")


def entry_block(grub_cfg: str, entry: str) -> list[str]:
    """The lines of the menu entry `entry` (a grub-reboot argument, "SUB>ID"
    inside a submenu), from its menuentry line to its closing brace."""
    for found, block, complete in grub_entries(grub_cfg):
        if found == entry and complete:
            return block
    raise UserError(f"grub.cfg has no complete menu entry {entry}: run update-grub and try again")


def linux_params(block: list[str]) -> list[str]:
    """The kernel parameters on the entry's one linux line."""
    lines = [s.split()[2:] for s in block if re.match(r"linux\s+\S+", s)]
    if len(lines) != 1:
        raise UserError(f"the running kernel's GRUB entry has {len(lines)} linux lines, rtforge can copy an entry "
                        "with one: put the words into /etc/default/grub by hand")
    return lines[0]


def try_entry(block: list[str], params: list[str]) -> str:
    """The entry to try: `block` renamed, its linux line's parameters replaced by `params`."""
    lines = [f"menuentry '{TRY_TITLE}' --id {TRY_ID} {{"]
    for s in block[1:-1]:
        if m := re.match(r"(linux\s+\S+)", s):
            s = " ".join([m[1], *params])
        lines.append("\t" + s)
    return "\n".join([*lines, "}"]) + "\n"


def try_script(entry: str, label: str) -> str:
    # quoted here-document: grub-mkconfig copies the entry as it is
    return (f"#!/bin/sh\n# written by rtforge tune: a kernel command line tried once (grub-reboot), {label}; "
            "removed after the try\ncat <<'RTFORGE_ENTRY'\n" + entry + "RTFORGE_ENTRY\n")


class GrubCmdline(Payload):
    """The running entry's command line without the words `remove` (exactly
    those) and with `add` (replacing earlier values of their keys); `dropin`
    is the drop-in text (None: none) that makes the change the default once
    it verifies."""
    kind = "the new kernel command line"
    tools = ("update-grub", "chmod", "rm")
    mech: GrubCmdlineTry

    def __init__(self, add: list[str], remove: list[str], dropin: str | None, label: str):
        super().__init__()
        bad = [w for w in (*add, *remove) if not _SAFE.match(w)]
        if bad:
            raise UserError(f"{bad[0]!r} cannot go on a GRUB command line from rtforge: give kernel parameters "
                            "without spaces, quotes, braces, $, ` or \\")
        self.add, self.remove, self.dropin, self.label = list(add), list(remove), dropin, label
        self.marker = f"{MARKER}={secrets.token_hex(4)}"
        self.expect = Expect(what="the new kernel command line", cmdline_has=(*add, self.marker))

    def script(self) -> str:
        """TRY_SCRIPT's text: the running kernel's entry with the new command line."""
        block = entry_block(self.mech.grub_cfg(), self.mech.old_entry)
        kept = [w for w in linux_params(block) if w not in self.remove]
        params = edit_cmdline(" ".join(kept), self.add, []).split()
        return try_script(try_entry(block, [*params, self.marker]), self.label)

    def removed(self) -> str:
        return "the try entry was removed"

    def tidy(self) -> None:
        pass


class GrubCmdlineTry(GrubTry[GrubCmdline]):
    ARM_STEP = "the try entry, for the next boot only"

    def update_grub(self) -> None:
        if why := _update_grub(self.target):
            raise UserError(f"update-grub failed on {self.name} ({why})")

    def arm(self, steps: Steps) -> None:
        # The try entry is the arming: undone with it (a try that boots but
        # fails verification leaves no entry behind either).
        t, path = self.target.t, self.target.path(TRY_SCRIPT)
        script = self.payload.script()

        def arm():
            t.write_bytes(path, script.encode(), sudo=True, step=f"writing {TRY_SCRIPT}")
            t.run(["chmod", "755", path], sudo=True, check=True, step=f"chmod {TRY_SCRIPT}")
            self.update_grub()
            if TRY_ID not in self.grub_cfg():
                raise UserError(f"update-grub did not put rtforge's try entry into grub.cfg: is {TRY_SCRIPT} run by "
                                "grub-mkconfig (/etc/grub.d)?")
            t.run(["grub-reboot", TRY_ID], sudo=True, check=True, step="grub-reboot")

        def disarm():
            t.run(["grub-editenv", self.grubenv_path(), "unset", "next_entry"], sudo=True)
            t.run(["rm", "-f", "--", path], sudo=True)
            self.target.update_grub()
        self.new_entry = TRY_ID
        steps.run(self.ARM_STEP, arm, disarm)

    def tried(self, after: DeviceFacts) -> bool | None:
        return self.payload.marker in after.cmdline.split()

    def commit(self) -> tuple[str, None]:
        t = self.target.t
        t.run(["rm", "-f", "--", self.target.path(TRY_SCRIPT)], sudo=True, check=True, step=f"removing {TRY_SCRIPT}")
        put_dropin(self.target, self.payload.dropin)
        return f"its default GRUB entries' command line ({self.facts.release})", None

    def phrases(self):
        ph = super().phrases()
        ph.old, ph.fallback_by = f"its previous command line ({self.facts.release})", "GRUB used its default entry"
        return ph


def tune_grub_cmdline(target: Device, add: list[str], remove: list[str], dropin: str | None, *, label: str,
                      timeout_s: float = 300, on_step: Callable[[str], None] | None = None,
                      on_wait: Callable[[float], None] | None = None) -> DeployResult:
    """Try the running entry's command line with `add`, without `remove`, once;
    when it verifies, `dropin` (None: no drop-in) makes it the default and the
    try entry goes."""
    return try_once(GrubCmdlineTry(target, GrubCmdline(add, remove, dropin, label), timeout_s=timeout_s,
                                   on_step=on_step, on_wait=on_wait))
