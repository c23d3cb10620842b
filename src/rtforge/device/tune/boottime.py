"""The boot-time part of `rtforge tune`: kernel command line words
(isolcpus=, nohz_full=, rcu_nocbs=, irqaffinity=, the dwc_otg FIQ).

A wrong command line can stop a board from booting, so nothing here edits
the command line the board boots now in place:

  Raspberry Pi  the words go through trycmdline.tune_cmdline: a new cmdline
                file tried once with tryboot, verified in /proc/cmdline, kept
                -- or the firmware falls back by itself.
  GRUB          grubcmdline.tune_grub_cmdline: a menu entry of rtforge's own
                (the running kernel's, with the words) tried once with
                grub-reboot, verified in /proc/cmdline; the commit puts the
                words into a drop-in of their own (DROPIN, read by
                grub-mkconfig after /etc/default/grub) for every default
                entry -- or GRUB boots its saved default by itself.

Before anything changes, the exact command line before (a Pi: the text of
the cmdline file the firmware reads; GRUB: the drop-in's text or its
absence) is saved in the tune state; `--revert` restores exactly that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...errors import UserError
from ..deploy.grubcmdline import DROPIN, dropin_text, dropin_words, read_dropin, tune_grub_cmdline
from ..deploy.trycmdline import edit_cmdline, tune_cmdline
from ..firmware.bootcfg import resolve
from ..firmware.bootfs import RemoteBootFiles
from ..firmware.pimodels import model_for_dt
from ..state.tunestate import SavedSetting, TuneState, load_state, save_state
from ..transport.device import Device
from ..transport.facts import DeviceFacts


@dataclass
class BootResult:
    ok: bool
    message: str
    rebooted: bool = False          # the try rebooted the board (runtime settings are gone)


def _how(board: Device, f: DeviceFacts) -> str:
    if f.boot_dir is not None:
        return "pi"
    if f.grub and board.runs_grub():
        return "grub"
    if f.grub:
        raise UserError(f"{board.name} is a tree under {board.root}: rtforge does not run its update-grub; "
                        "leave out the boot-time words with --only")
    raise UserError(f"{board.name} has neither a Raspberry Pi boot partition (config.txt in /boot/firmware or /boot) "
                    "nor GRUB (grub-reboot): put the words on its kernel command line by hand")


def _pi_text(board: Device, f: DeviceFacts) -> str:
    """The command line the firmware reads now (not /proc/cmdline: the firmware adds words of its own)."""
    assert f.boot_dir is not None, "_how said 'pi' from these same facts: they name the boot partition"
    text = resolve(RemoteBootFiles(board, f.boot_dir), model_for_dt(f.model)).cmdline
    if text is None:
        raise UserError(f"{board.name} has no command line file that the firmware reads: "
                        "run `rtforge bootcheck` on its boot partition")
    return text


def apply(board: Device, changes: list, *, on_step: Callable[[str], None] | None = None,
          on_wait: Callable[[float], None] | None = None) -> BootResult:
    """Save the command line before, then apply the words `changes` want."""
    facts = board.facts()
    how = _how(board, facts)
    state = load_state(board) or TuneState(boot_id="")
    if state.boot_before is None:                       # the first before wins
        state.boot_before = ({"how": "pi", "cmdline": _pi_text(board, facts)} if how == "pi" else
                             {"how": "grub", "dropin": read_dropin(board)})
        save_state(board, state)
    words = [c.wanted for c in changes]
    try:
        if how == "pi":
            r = tune_cmdline(board, words, on_step=on_step, on_wait=on_wait)
        else:
            mine = edit_cmdline(" ".join(s.applied for s in state.boot), words, [])
            r = tune_grub_cmdline(board, words, [], dropin_text(mine.split()), label=" ".join(words),
                                  on_step=on_step, on_wait=on_wait)
        result = BootResult(r.ok, r.message, rebooted=True)   # every outcome of a try comes after its reboot
    except UserError:
        if not state.boot:              # refused before the command line changed: no record of a before
            state.boot_before = None
            save_state(board, state)
        raise
    state = load_state(board) or state
    if result.ok:
        known = {s.key: s for s in state.boot}
        for c in changes:
            if c.key in known:
                known[c.key].applied = c.wanted
            else:
                state.boot.append(SavedSetting(c.op, c.kind, c.target, c.before, c.wanted, c.label))
    elif not state.boot:
        state.boot_before = None                         # nothing of ours is on the command line
    save_state(board, state)
    return result


def running_has(board: Device, settings: list[SavedSetting]) -> dict[str, bool]:
    """{key: whether the running kernel's /proc/cmdline has the word applied}."""
    words = board.t.read_text(board.path("/proc/cmdline"), step="reading /proc/cmdline").split()
    return {s.key: s.applied in words for s in settings}


def revert(board: Device, state: TuneState, *, on_step: Callable[[str], None] | None = None,
           on_wait: Callable[[float], None] | None = None) -> BootResult:
    """Restore the exact command line from before; the boot part of the state is cleared when it is."""
    before = state.boot_before or {}
    if before.get("how") == "pi":
        r = tune_cmdline(board, before["cmdline"].split(), replace=True, on_step=on_step, on_wait=on_wait)
        restored = before["cmdline"]
    else:
        # rtforge's words go; a drop-in from before comes back, words and all
        old = before.get("dropin")
        restored = f"{DROPIN} as it was" if old else f"no {DROPIN}"
        r = tune_grub_cmdline(board, dropin_words(old), [s.applied for s in state.boot], old,
                              label="the command line from before", on_step=on_step, on_wait=on_wait)
    if not r.ok:
        raise UserError(f"the command line from before was not restored: {r.message}; the record stays: "
                        "run rtforge tune --revert again")
    result = BootResult(True, f"{board.name} boots its command line from before again: {restored}", rebooted=True)
    state.boot, state.boot_before = [], None
    save_state(board, state)
    return result
