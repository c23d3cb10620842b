"""Try something once at boot, then keep it -- or fall back by itself.

Every change that decides what a target boots goes one way (architecture rule 6, docs/architecture.md):

  check    the payload and the target; nothing on the target changes if it fails
  upload   into STAGING, every sha256 checked there (Transport.put_verified)
  install  next to what boots now, never over it
  arm      make the next boot, and only the next, try it
  reboot   and wait for the target to answer with a new boot id
  verify   the same rules everywhere (``verify`` below)
  commit   make it the default -- or undo, and say what happened.

Two parts plug into it.  A *mechanism* knows one boot loader's try-once:
the Raspberry Pi firmware's tryboot.txt (pitry.py) or GRUB's grub-reboot
(grubtry.py).  A *payload* knows what is tried: a kernel bundle
(pibundle.py), Raspberry Pi's RT package (official.py), a kernel .deb
(deb.py), a kernel command line (trycmdline.py, grubcmdline.py).  Neither
decides an outcome: the four outcomes and their messages are here, once.

Every step before the reboot registers its undo (steps.py), so a
failure anywhere before it leaves the target as it was.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ... import tools
from ..transport.device import Device
from ..transport.facts import DeviceFacts
from ..transport.safesh import BOARD_DIR, ensure_owned
from .manifest import kernel_problems
from .steps import Steps

# Uploads wait here until installed: in root's own folder, never in a place
# such as /var/tmp where another user could make the folder first and swap a
# verified file before it is installed (transport/safesh.py checks it).
STAGING = f"{BOARD_DIR}/staging"


def make_staging(target: Device) -> str:
    """The staging folder on the target, made or checked as root's own; its path."""
    ensure_owned(target.t, target.path(BOARD_DIR), target.path(STAGING), readable=(target.path(BOARD_DIR),),
                 step="making the staging folder")
    return target.path(STAGING)


@dataclass
class Expect:
    """What must be true once the try has booted."""
    what: str                            # shown in messages: "6.12.0-rt5-rtforge", "the new command line"
    release: str | None = None           # uname -r of the try (None: the kernel stays the same)
    marker: str | None = None            # a word uname -v must hold (a bundle manifest's uname_v_marker)
    cmdline_has: tuple[str, ...] = ()    # words /proc/cmdline must hold


@dataclass
class DeployResult:
    ok: bool
    state: str                 # committed | not-back | not-verified | fell-back
    release: str               # what was tried (Expect.what)
    message: str
    running: str | None = None
    now_boots: Any = None      # a Raspberry Pi's BootChoice after a commit
    not_undone: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class Phrases:
    """How a mechanism words its state, filled into the outcomes below."""
    unchanged: str              # "config.txt is untouched": the default did not move
    old: str                    # "its previous kernel (kernel8.img)": what the default boots
    reset: str                  # "a power cycle": what brings the default back
    fallback_by: str            # "the firmware fell back": who chose the default when the try failed
    after_undo: str = ""        # not-verified: the state once the arm step is undone (default: unchanged)
    no_way_back: str = ""       # set when the default itself was changed (no try): the not-back advice


class Payload:
    """What is tried: its checks, upload and install steps, what to expect.
    `mech` is set when a mechanism takes the payload."""
    kind = "the new kernel"     # "... did not boot" in messages
    expect: Expect
    mech: Any = None
    # what the payload runs on the target (tools.toml names the packages)
    tools: tuple[str, ...] = ("sha256sum", "tar", "mkdir", "mv", "rm", "sync")

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def check(self, target: Device, facts: DeviceFacts) -> None:
        """Refuse (UserError) before anything changes."""

    def upload(self, steps: Steps) -> None:
        """Upload with Transport.put_verified, registering the undo."""

    def install(self, steps: Steps) -> None:
        """Install next to what boots now, registering each undo."""

    def removed(self) -> str:
        """How the fell-back outcome ends: what was removed."""
        return f"{self.expect.what} was removed"

    def left_after_not_back(self) -> str:
        """Appended to the not-back outcome (e.g. where the files stay)."""
        return ""

    def tidy(self) -> None:
        """After the commit: remove what only the try needed (staging)."""


P = TypeVar("P", bound=Payload)


class Mechanism(ABC, Generic[P]):
    """One boot loader's try-once.  Subclasses set ARM_STEP, the name of the
    step that arms the try (the only one undone when the try boots but fails
    verification), and KEEP_ON_FALLBACK, steps that stay when it fell back.
    P is the payloads it takes: what they give beyond Payload (a config.txt
    block, a GRUB script) is what the mechanism asks of them."""
    ARM_STEP = "arm"
    KEEP_ON_FALLBACK: frozenset = frozenset()
    tools: tuple[str, ...] = ("cat",)     # what the mechanism runs on the target (and target.reboot_tools)

    def __init__(self, target: Device, payload: P, *, timeout_s: float = 300,
                 on_step: Callable[[str], None] | None = None, on_wait: Callable[[float], None] | None = None):
        self.target, self.payload = target, payload
        self.timeout_s, self.on_wait = timeout_s, on_wait
        self.steps = Steps(on_step)
        self.warnings: list[str] = []
        payload.mech = self

    @property
    def name(self) -> str:
        return self.target.name

    @abstractmethod
    def check(self) -> DeviceFacts:
        """The target's facts, checked (payload.check included); nothing changes."""

    def before_install(self, steps: Steps) -> None:  # noqa: B027 -- a hook: most mechanisms need nothing here
        """A step the mechanism needs before the payload installs (GRUB: pin the default)."""

    @abstractmethod
    def arm(self, steps: Steps) -> None:
        """Make the next boot try the payload (registered as ARM_STEP, with its undo)."""

    @abstractmethod
    def reboot(self) -> None:
        """Reboot into the try."""

    @abstractmethod
    def tried(self, after: DeviceFacts) -> bool | None:
        """Whether this boot was the try (None: the target cannot tell)."""

    @abstractmethod
    def commit(self) -> tuple[str, Any]:
        """Make the try the default; (what now boots, in words; a detail object)."""

    @abstractmethod
    def phrases(self) -> Phrases:
        """The mechanism's words for the outcomes (after check)."""


def verify(expect: Expect, after: DeviceFacts, tried: bool | None) -> tuple[bool, list[str]]:
    """The rules every try is held to: (is the try what runs, what is wrong
    with it).  The try runs when the expected release runs -- or, when the
    kernel stays the same, when the target says this boot was the try."""
    on_try = after.release == expect.release if expect.release else tried is not False
    problems = []
    if on_try and tried is False:
        problems.append("the boot was not the try")
    if expect.marker:
        problems += kernel_problems(expect.marker, after.version, after.realtime,
                                    config_from=after.config_from, config_rt=after.config_rt)
    missing = [w for w in expect.cmdline_has if w not in after.cmdline.split()]
    if missing:
        problems.append(f"the kernel command line lacks {' '.join(missing)}")
    return on_try, problems


def try_once(mech: Mechanism[P]) -> DeployResult:
    """Run a payload through a mechanism: the template of every deploy."""
    p, steps, name = mech.payload, mech.steps, mech.name
    before = mech.check()
    # everything it will run there, named with its package before anything changes
    tools.require_on(mech.target.t, [*mech.tools, *mech.target.reboot_tools, *p.tools], "this deploy")
    ph = mech.phrases()
    warnings = [*mech.warnings, *p.warnings]

    def before_reboot():
        p.upload(steps)
        mech.before_install(steps)
        p.install(steps)
        mech.arm(steps)
    steps.guarded(before_reboot, f"{ph.unchanged}, so {name} still boots {ph.old}")
    steps.run("reboot into the try" if not ph.no_way_back else "reboot", mech.reboot)
    what = p.expect.what

    def result(ok: bool, state: str, message: str, **kw) -> DeployResult:
        return DeployResult(ok, state, what, message, warnings=warnings, **kw)

    ph = mech.phrases()  # again: arming may have named a backup
    if not mech.target.wait_back(before.boot_id, mech.timeout_s, mech.on_wait):
        how = ph.no_way_back or f"{ph.unchanged}, so after {ph.reset} it boots {ph.old} again{p.left_after_not_back()}"
        return result(False, "not-back", f"{name} did not come back within {mech.timeout_s:.0f} s: {how}")
    after = mech.target.facts()
    on_try, problems = verify(p.expect, after, mech.tried(after))
    if not on_try:
        not_undone = steps.unwind(only=lambda s: s not in mech.KEEP_ON_FALLBACK)
        left = f" (could not undo: {'; '.join(not_undone)})" if not_undone else ""
        running = f"its previous kernel {after.release}" if p.expect.release else \
            f"its previous setup ({after.release})"
        return result(False, "fell-back", f"{name} came back on {running}: {p.kind} did not boot, so "
                      f"{ph.fallback_by}; {ph.unchanged} and {p.removed()}{left}",
                      running=after.release, not_undone=not_undone)
    if problems:
        # Only the arming is undone: what runs now keeps its files.
        steps.unwind(only=lambda s: s == mech.ARM_STEP)
        return result(False, "not-verified", f"{name} runs {what} for this boot only, but {'; '.join(problems)}: "
                      f"{ph.after_undo or ph.unchanged}, so `sudo reboot` returns it to {ph.old}",
                      running=after.release)
    now, detail = mech.commit()
    p.tidy()
    steps.keep()
    marker = f" ({p.expect.marker})" if p.expect.marker else ""
    return result(True, "committed", f"{name} runs {what}{marker} and now boots it by default: {now}",
                  running=after.release, now_boots=detail)
