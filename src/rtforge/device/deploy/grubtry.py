"""GRUB's try-once: `grub-reboot ENTRY` boots ENTRY for the next boot only
(it needs GRUB_DEFAULT=saved); the commit is `grub-set-default ENTRY`.

Before the payload installs, the running kernel is pinned as the saved
default, so a kernel package's update-grub cannot make the newest kernel
the default behind rtforge's back; whatever fails to boot leaves GRUB on
that saved default.  A kernel .deb (deb.py) and a kernel command line
(grubcmdline.py) are tried through it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ...errors import UserError
from ..transport.facts import DeviceFacts
from .steps import Steps
from .tryonce import Mechanism, P, Phrases

_SUBMENU_RE = re.compile(r"submenu\s.*\$menuentry_id_option\s+'([^']+)'")
_ENTRY_RE = re.compile(r"menuentry\s.*\$menuentry_id_option\s+'([^']+)'")


def grub_entries(grub_cfg: str) -> Iterator[tuple[str, list[str], bool]]:
    """Each menu entry of a grub.cfg written by grub-mkconfig: its grub-reboot
    argument ("SUBMENU_ID>ENTRY_ID" inside a submenu), its lines (stripped,
    from the menuentry line to its closing brace) and whether it is complete
    (a cut-off file ends inside one)."""
    submenu, sub_depth, depth, entry, start = None, 0, 0, "", 0
    block: list[str] | None = None      # the lines of the entry being read
    for line in grub_cfg.splitlines():
        s = line.strip()
        if block is None:
            if m := _SUBMENU_RE.match(s):
                submenu, sub_depth = m[1], depth
            elif m := _ENTRY_RE.match(s):
                entry, block, start = (f"{submenu}>{m[1]}" if submenu else m[1]), [], depth
        if block is not None:
            block.append(s)
        depth += s.count("{") - s.count("}")
        if block is not None and depth <= start:
            yield entry, block, True
            block = None
        if submenu and depth <= sub_depth:
            submenu = None
    if block is not None:
        yield entry, block, False


def menu_entries(grub_cfg: str) -> dict[str, str]:
    """{kernel release: grub-reboot argument} for the Linux entries of grub.cfg.

    Entries in the "Advanced options" submenu ("SUBMENU_ID>ENTRY_ID") name
    one kernel for good; Debian's first, simple entry always means "the
    newest kernel", so it is used only when there is nothing better."""
    out: dict[str, str] = {}
    for entry, block, _ in grub_entries(grub_cfg):
        if "recovery" in entry:
            continue
        for s in block:
            if (m := re.match(r"linux\s+\S*vmlinuz-(\S+)", s)) and (m[1] not in out or
                                                                   (">" in entry and ">" not in out[m[1]])):
                out[m[1]] = entry
    return out


def boot_image(cmdline: str) -> str | None:
    """The kernel file GRUB booted, from BOOT_IMAGE= in /proc/cmdline."""
    m = re.search(r"(?:^|\s)BOOT_IMAGE=(\S+)", cmdline)
    return posixpath.basename(m[1]) if m else None


class GrubTry(Mechanism[P]):
    """Any payload (a .deb, a command line) tried through grub-reboot."""

    tools = ("cat", "grub-reboot", "grub-set-default", "grub-editenv")
    ARM_STEP = "grub-reboot into the try"
    KEEP_ON_FALLBACK = frozenset({"pin the running kernel"})  # the running kernel stays the default

    def grubenv_path(self) -> str:
        return self.target.path("/boot/grub/grubenv")

    def grub_cfg(self) -> str:
        return self.target.t.read_text(self.target.path("/boot/grub/grub.cfg"), sudo=True, step="reading grub.cfg")

    def grubenv(self) -> dict[str, str]:
        out = self.target.t.run(["grub-editenv", self.grubenv_path(), "list"], sudo=True).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def check(self) -> DeviceFacts:
        t, f = self.target, self.target.facts()
        self.facts = f
        if not f.grub:
            raise UserError(f"{t.name} has no grub-reboot: this .deb path is for GRUB boards "
                            "(a Raspberry Pi takes a bundle)")
        self.payload.check(t, f)
        default = t.t.run(["sh", "-c", '. "$1" 2>/dev/null; printf %s "$GRUB_DEFAULT"', "sh",
                           t.path("/etc/default/grub")]).stdout.strip()
        if default != "saved":
            raise UserError(f"{t.name} has GRUB_DEFAULT={default or '0'}: trying a kernel once needs "
                            "GRUB_DEFAULT=saved in /etc/default/grub (then run update-grub), so that grub-reboot "
                            "can work")
        entries = menu_entries(self.grub_cfg())
        if f.release not in entries:
            raise UserError(f"the running kernel {f.release} has no entry in grub.cfg: run update-grub on "
                            f"{t.name} first")
        self.old_entry = entries[f.release]
        self.old_env = self.grubenv()
        self.warnings = [w for w in [f.panic_warning("GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub")]
                         if w]
        return f

    def before_install(self, steps: Steps) -> None:
        # Pin the running kernel first: update-grub would otherwise make the
        # newest kernel entry 0, the default of a GRUB without saved_entry.
        t, old_saved = self.target.t, self.old_env.get("saved_entry")
        steps.run("pin the running kernel",
                  lambda: t.run(["grub-set-default", self.old_entry], sudo=True, check=True, step="pin"),
                  lambda: t.run(["grub-set-default", old_saved] if old_saved else
                                ["grub-editenv", self.grubenv_path(), "unset", "saved_entry"], sudo=True))

    def arm(self, steps: Steps) -> None:
        release = self.payload.expect.release
        entries = menu_entries(self.grub_cfg())
        if release not in entries:
            raise UserError(f"after installing, grub.cfg has no entry for {release}: is update-grub run by "
                            "the board's kernel hooks (/etc/kernel/postinst.d)?")
        self.new_entry, self.try_image = entries[release], f"vmlinuz-{release}"
        t = self.target.t
        steps.run(self.ARM_STEP,
                  lambda: t.run(["grub-reboot", self.new_entry], sudo=True, check=True, step="grub-reboot"),
                  lambda: t.run(["grub-editenv", self.grubenv_path(), "unset", "next_entry"], sudo=True))

    def reboot(self) -> None:
        self.target.reboot(tryboot=False)

    def tried(self, after: DeviceFacts) -> bool | None:
        image = boot_image(after.cmdline)
        return None if image is None else image == self.try_image

    def commit(self) -> tuple[str, None]:
        self.target.t.run(["grub-set-default", self.new_entry], sudo=True, check=True, step="commit")
        return (f"GRUB entry {self.new_entry}; `grub-set-default '{self.old_entry}'` returns to "
                f"{self.facts.release}"), None

    def phrases(self) -> Phrases:
        return Phrases("GRUB's default is untouched (grub-reboot was for one boot only)",
                       f"its previous kernel {self.facts.release}", "a reset", "GRUB used its default")
