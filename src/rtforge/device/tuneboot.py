"""The boot-time part of `rtforge tune`: kernel command line words
(isolcpus=, nohz_full=, rcu_nocbs=, irqaffinity=, the dwc_otg FIQ).

A wrong command line can stop a board from booting, so nothing here edits
the command line the board boots now in place:

  Raspberry Pi  the words go through trycmdline.tune_cmdline: a new cmdline
                file tried once with tryboot, verified in /proc/cmdline, kept
                -- or the firmware falls back by itself.
  GRUB          the words go into a drop-in of their own (DROPIN, sourced by
                grub-mkconfig after /etc/default/grub) and update-grub runs;
                a failed update-grub removes the drop-in again.  This is NOT
                tried once: GRUB has no one-shot command line, and a one-shot
                needs a menu entry of rtforge's own (not written yet), so
                the words take effect at the next reboot, and `--show` says
                whether the running kernel has them.

Before anything changes, the exact command line before (a Pi: the text of
the cmdline file the firmware reads; GRUB: the drop-in's text or its
absence) is saved in the tune state; `--revert` restores exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import UserError
from .bootcfg import resolve
from .bootfs import RemoteBootFiles
from .pimodels import model_for_dt
from .target import Target
from .trycmdline import edit_cmdline, tune_cmdline
from .tunestate import SavedSetting, TuneState, load_state, save_state

DROPIN = "/etc/default/grub.d/rtforge-tune.cfg"
_SHELL_SPECIAL = set('"$`\\')     # the drop-in is shell: a word must stay one literal word inside "..."


def dropin_text(words: list[str]) -> str:
    """The GRUB drop-in adding `words` to the default entries' command line."""
    bad = [w for w in words if set(w) & _SHELL_SPECIAL or not w.strip() or len(w.split()) != 1]
    if bad:
        raise UserError(f"{bad[0]!r} cannot go into a GRUB drop-in: give kernel parameters without spaces, "
                        'quotes, $, ` or \\')
    return ("# written by rtforge tune; rtforge tune --revert removes it (then update-grub)\n"
            f'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT {" ".join(words)}"\n')


@dataclass
class BootResult:
    ok: bool
    message: str
    reboot_needed: bool = False     # GRUB: the words wait for the next boot
    rebooted: bool = False          # a Pi: the try rebooted the board (runtime settings are gone)


def _how(board: Target) -> str:
    f = board.facts()
    if f.boot_dir is not None:
        return "pi"
    if f.grub and board.runs_grub():
        return "grub"
    if f.grub:
        raise UserError(f"{board.name} is a tree under {board.root}: rtforge does not run its update-grub; "
                        "leave out the boot-time words with --only")
    raise UserError(f"{board.name} has neither a Raspberry Pi boot partition (config.txt in /boot/firmware or /boot) "
                    "nor GRUB (grub-reboot): put the words on its kernel command line by hand")


def _pi_text(board: Target) -> str:
    """The command line the firmware reads now (not /proc/cmdline: the firmware adds words of its own)."""
    f = board.facts()
    text = resolve(RemoteBootFiles(board, f.boot_dir), model_for_dt(f.model)).cmdline
    if text is None:
        raise UserError(f"{board.name} has no command line file that the firmware reads: "
                        "run `rtforge bootcheck` on its boot partition")
    return text


def _read_dropin(board: Target) -> str | None:
    r = board.t.run(["cat", "--", board.path(DROPIN)], sudo=True)
    return r.stdout if r.returncode == 0 else None


def _put_dropin(board: Target, text: str | None) -> None:
    """Write (None: remove) the drop-in, then update-grub; the drop-in is undone when update-grub fails."""
    t, path = board.t, board.path(DROPIN)
    old = _read_dropin(board)

    def put(value):
        if value is None:
            t.run(["rm", "-f", "--", path], sudo=True, check=True, step=f"removing {DROPIN}")
        else:
            t.run(["mkdir", "-p", "--", path.rsplit("/", 1)[0]], sudo=True, check=True, step="creating grub.d")
            t.write_bytes(path, value.encode(), sudo=True, step=f"writing {DROPIN}")
    put(text)
    r = board.update_grub()
    if r.returncode:
        put(old)
        board.update_grub()
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise UserError(f"update-grub failed on {board.name} ({why}), so {DROPIN} was put back as it was: "
                        "fix /etc/default/grub and try again")


def apply(board: Target, changes: list, *, on_step: Callable[[str], None] | None = None,
          on_wait: Callable[[float], None] | None = None) -> BootResult:
    """Save the command line before, then apply the words `changes` want."""
    how = _how(board)
    state = load_state(board) or TuneState(boot_id="")
    if state.boot_before is None:                       # the first before wins
        state.boot_before = ({"how": "pi", "cmdline": _pi_text(board)} if how == "pi" else
                             {"how": "grub", "dropin": _read_dropin(board)})
        save_state(board, state)
    words = [c.wanted for c in changes]
    try:
        if how == "pi":
            r = tune_cmdline(board, words, on_step=on_step, on_wait=on_wait)
            result = BootResult(r.ok, r.message, rebooted=True)   # every outcome of a try comes after its reboot
        else:
            mine = edit_cmdline(" ".join(s.applied for s in state.boot), words, [])
            _put_dropin(board, dropin_text(mine.split()))
            result = BootResult(True, f"{DROPIN} holds {mine} and update-grub ran: the words take effect at the "
                                      f"next reboot (not tried once first: if {board.name} does not boot with "
                                      "them, pick the entry in GRUB's menu, press e and delete them)",
                                reboot_needed=True)
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


def running_has(board: Target, settings: list[SavedSetting]) -> dict[str, bool]:
    """{key: whether the running kernel's /proc/cmdline has the word applied}."""
    words = board.t.run(["cat", board.path("/proc/cmdline")]).stdout.split()
    return {s.key: s.applied in words for s in settings}


def revert(board: Target, state: TuneState, *, on_step: Callable[[str], None] | None = None,
           on_wait: Callable[[float], None] | None = None) -> BootResult:
    """Restore the exact command line from before; the boot part of the state is cleared when it is."""
    before = state.boot_before or {}
    if before.get("how") == "pi":
        r = tune_cmdline(board, before["cmdline"].split(), replace=True, on_step=on_step, on_wait=on_wait)
        if not r.ok:
            raise UserError(f"the command line from before was not restored: {r.message}; the record stays: "
                            "run rtforge tune --revert again")
        result = BootResult(True, f"{board.name} boots its command line from before again: {before['cmdline']}",
                            rebooted=True)
    else:
        _put_dropin(board, before.get("dropin"))
        result = BootResult(True, f"{DROPIN} is {'as it was' if before.get('dropin') else 'removed'} and "
                                  f"update-grub ran: reboot {board.name} to boot without the words",
                            reboot_needed=True)
    state.boot, state.boot_before = [], None
    save_state(board, state)
    return result
