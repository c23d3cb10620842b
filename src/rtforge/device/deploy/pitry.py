"""The Raspberry Pi firmware's try-once: tryboot.txt.

`reboot '0 tryboot'` makes the firmware read tryboot.txt instead of
config.txt for one boot; the flag is cleared before the firmware starts, so
any crash, hang, watchdog reset or power cycle returns to config.txt (EEPROM
boot flow, "Fail-safe OS updates").  So the try is armed by writing
tryboot.txt = config.txt + a block of lines from the payload, checked first
with rtforge's firmware model (bootcfg: the same one `rtforge bootcheck`
uses); it is committed by writing the same text to config.txt, after a
backup.  Blocks are tagged (kernel, cmdline), so a later block of one kind
replaces the earlier one of its kind and leaves the others.

A payload for this mechanism (PiPayload) gives the block and says whether
the firmware model's prediction is what it wants.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ...errors import UserError
from ..firmware.bootcfg import BootChoice, resolve, resolve_text
from ..firmware.bootfs import RemoteBootFiles
from ..firmware.pimodels import PiModel, model_for_dt
from ..transport.device import Device
from ..transport.facts import DeviceFacts
from .steps import Steps
from .tryonce import Mechanism, Payload, Phrases

BLOCK_BEGIN = "# rtforge begin"
BLOCK_END = "# rtforge end"


class PiPayload(Payload):
    block_tag = "kernel"
    mech: PiTryboot

    def block_lines(self) -> list[str] | None:
        """The lines after [all] that select the payload."""
        raise NotImplementedError

    def block_label(self) -> str:
        return self.expect.what

    def wrong_choice(self, choice: BootChoice) -> str | None:
        """Why the firmware model's prediction for the armed config is not
        what this payload needs (None: it is)."""
        raise NotImplementedError


def _is_begin(line: str, tag: str) -> bool:
    s = line.strip()
    if not s.startswith(BLOCK_BEGIN):
        return False
    rest = s[len(BLOCK_BEGIN):]
    # "# rtforge begin: ..." is the untagged form of the first releases: a kernel block.
    return rest.startswith(f" {tag}:") or (tag == "kernel" and rest.startswith(":"))


def strip_block(config: str, tag: str = "kernel") -> str:
    """config.txt without rtforge's block of this tag (from an earlier deploy)."""
    out, inside = [], False
    for line in config.splitlines(keepends=True):
        if _is_begin(line, tag):
            inside = True
        elif inside and line.strip() == BLOCK_END:
            inside = False
        elif not inside:
            out.append(line)
    return "".join(out)


def one_line(label: str, limit: int = 120) -> str:
    """A label as the block's first line shows it: printable ASCII only.  A
    label comes from a bundle's manifest or a user's words, and a line break
    in it (a newline, a lone CR, a form feed, U+2028: all end a line for the
    reader of config.txt or for Python) would put lines of its own into
    config.txt, or end the block early."""
    return "".join(c if " " <= c <= "~" else "?" for c in label)[:limit]


def with_block(config: str, tag: str, label: str, lines: list[str] | None) -> str:
    """config.txt plus a block.  Appended last, after [all], so no earlier
    section can hide it and it overrides earlier lines of the same keys (a
    later line wins).  Line ends are kept as the file has them.  lines=None:
    the block of this tag taken out, nothing added."""
    if lines is None:
        return strip_block(config, tag)
    eol = "\r\n" if "\r\n" in config else "\n"
    block = [f"{BLOCK_BEGIN} {tag}: {one_line(label)}, {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}", "[all]", *lines,
             BLOCK_END]
    body = strip_block(config, tag)
    if body and not body.endswith("\n"):
        body += eol
    return body + eol.join(block) + eol


class PiTryboot(Mechanism[PiPayload]):
    def __init__(self, target: Device, payload: PiPayload, *, try_first: bool = True, **kw):
        super().__init__(target, payload, **kw)
        self.try_first = try_first
        self.ARM_STEP = "write tryboot.txt" if try_first else "write config.txt"
        self.backup: str | None = None

    def boot(self, rel: str = "") -> str:
        return self.target.path(f"{self.boot_dir}/{rel}".rstrip("/"))

    def sh(self, script: str, *args: str, step: str) -> None:
        """A fixed script with its paths as arguments (never pasted into it)."""
        self.target.t.run(["sh", "-c", script, "sh", *args], sudo=True, check=True, step=step)

    def files(self) -> RemoteBootFiles:
        """The boot partition as it is now (a new reader: no stale cache)."""
        return RemoteBootFiles(self.target, self.boot_dir)

    # -- checks ----------------------------------------------------------------
    def check(self) -> DeviceFacts:
        t, f = self.target, self.target.facts()
        self.facts = f
        self.payload.check(t, f)
        if f.boot_dir is None:
            raise UserError(f"{t.name} has no config.txt in /boot/firmware or /boot: this is not a Raspberry Pi "
                            "firmware boot partition (for a GRUB board, deploy the .deb)")
        self.boot_dir: str = f.boot_dir
        self.model: PiModel = model_for_dt(f.model)
        if self.try_first and not f.tryboot_supported:
            flag = t.path("/proc/device-tree/chosen/bootloader/tryboot")
            raise UserError(f"the firmware of {t.name} has no tryboot (no {flag}): update it (sudo apt full-upgrade; "
                            "rpi-eeprom-update on a Pi 4/5), or use --no-try and accept that a kernel that does "
                            "not boot needs the SD card in another computer")
        self.warnings = [w for w in [f.panic_warning("cmdline.txt")] if w]
        self.before = resolve(self.files(), self.model)
        self.config_path = self.boot("config.txt")
        self.old_config = t.t.read_bytes(self.config_path, sudo=True, step="reading config.txt")
        return f

    def new_config(self) -> str:
        p = self.payload
        return with_block(self.old_config.decode("utf-8", "replace"), p.block_tag, p.block_label(), p.block_lines())

    def check_with_model(self, text: str) -> BootChoice:
        """What the firmware will load from this text, before it is written:
        what the payload wants, and no warning that was not there before."""
        choice = resolve_text(text, self.files(), self.model, tryboot=self.try_first)
        new_warnings = [w for w in choice.warnings if w not in self.before.warnings]
        why = "; ".join(new_warnings) or self.payload.wrong_choice(choice)
        if why:
            raise UserError(f"the boot files are wrong, so nothing was rebooted: {why}")
        return choice

    # -- the try ---------------------------------------------------------------
    def arm(self, steps: Steps) -> None:
        text = self.new_config()
        self.check_with_model(text)
        name = "tryboot.txt" if self.try_first else "config.txt"
        path = self.boot(name)
        t = self.target.t
        old = t.read_bytes(path, sudo=True) if t.exists(path) else None
        if not self.try_first:
            self.backup = self._backup()
        undo = (lambda: t.write_bytes(path, old, sudo=True, step="cleanup")) if old is not None else \
            (lambda: self.sh('rm -f "$1"', path, step="cleanup"))
        steps.run(self.ARM_STEP, lambda: t.write_bytes(path, text.encode(), sudo=True, step=self.ARM_STEP), undo)

    def _backup(self) -> str:
        name = f"config.txt.rtforge-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
        self.target.t.write_bytes(self.boot(name), self.old_config, sudo=True, step="back up config.txt")
        return name

    def reboot(self) -> None:
        self.target.reboot(tryboot=self.try_first)

    def tried(self, after: DeviceFacts) -> bool | None:
        return after.tryboot_now if self.try_first else None

    def commit(self) -> tuple[str, BootChoice]:
        self.backup = self.backup or self._backup()
        self.target.t.write_bytes(self.config_path, self.new_config().encode(), sudo=True, step="commit")
        now = resolve(self.files(), self.model)
        self.sh('rm -f "$1"', self.boot("tryboot.txt"), step="tidy up")
        return (f"kernel {now.kernel}, dtb {now.dtb}, command line from {now.cmdline_file}; the previous config.txt "
                f"is saved as {self.backup} (`rtforge rollback {self.name}` restores it)"), now

    def phrases(self) -> Phrases:
        old = f"its previous kernel ({self.before.kernel})"
        if self.try_first:
            return Phrases("config.txt is untouched", old, "a power cycle", "the firmware fell back")
        return Phrases("config.txt is restored", old, "a power cycle", "the firmware fell back",
                       no_way_back="without tryboot there is no automatic way back: put its SD card in another "
                                   f"computer and copy {self.backup} over config.txt (`rtforge bootcheck` shows "
                                   "what would boot)")
