"""Installing a kernel on a Raspberry Pi without ever bricking it.

The firmware's one-shot tryboot is the safety net: the new kernel is tried
exactly once through tryboot.txt, and any crash, hang, watchdog reset or
power cycle returns to config.txt, which is only changed after the new
kernel has booted and proved to be the expected PREEMPT_RT kernel:

  check the bundle and the board (nothing changes on the board yet)
  -> upload to a staging directory, re-check every sha256 there
  -> install modules to /lib/modules/<release> (never the running kernel's)
  -> install image, dtbs and overlays under <boot>/rtforge-<release>/ (os_prefix)
  -> write tryboot.txt (config.txt + a block selecting the new kernel),
     checked first with the same firmware model as `rtforge bootcheck`
  -> reboot '0 tryboot' -> wait for SSH
  -> verify: uname -r, PREEMPT_RT in uname -v, /sys/kernel/realtime, the try flag
  -> commit: back up config.txt, replace it atomically, print what now boots.

Every step before the reboot undoes itself when a later one fails
(target/steps.py).  The GRUB counterpart is target/deploy_grub.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from ..errors import UserError
from .board import Board, BoardFacts, bootcfg_model
from .bootcfg import BootChoice, resolve, resolve_text
from .bootfs import RemoteBootFiles
from .bundle import Bundle
from .steps import Steps

STAGING = "/var/tmp/rtforge-staging"
BLOCK_BEGIN = "# rtforge begin"
BLOCK_END = "# rtforge end"
MARGIN_KB = 4096


@dataclass
class DeployResult:
    ok: bool
    state: str                 # committed | not-back | not-verified | fell-back
    release: str
    message: str
    running: str | None = None
    now_boots: BootChoice | None = None
    not_undone: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def prefix_for(release: str) -> str:
    return f"rtforge-{release}/"


def strip_block(config: str) -> str:
    """config.txt without rtforge's own block (from an earlier deploy)."""
    out, inside = [], False
    for line in config.splitlines(keepends=True):
        if line.strip().startswith(BLOCK_BEGIN):
            inside = True
        elif inside and line.strip() == BLOCK_END:
            inside = False
        elif not inside:
            out.append(line)
    return "".join(out)


def with_block(config: str, bundle: Bundle, arm64: bool) -> str:
    """config.txt plus the lines that select the new kernel.  Appended last
    after [all], so no earlier section can hide it and it overrides earlier
    kernel=/os_prefix= lines (a later line wins)."""
    eol = "\r\n" if "\r\n" in config else "\n"
    lines = [f"{BLOCK_BEGIN}: {bundle.release} ({bundle.board}), {datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
             "[all]", f"os_prefix={prefix_for(bundle.release)}", f"kernel={bundle.image}"]
    if arm64:
        lines.append("arm_64bit=1")  # a non-standard kernel name does not imply 64-bit
    # The bundle has no initramfs (the defconfigs build the SD card and root
    # filesystem drivers in); Bookworm's auto_initramfs=1 would otherwise look
    # for one named after the kernel.
    lines.append("auto_initramfs=0")
    lines.append(BLOCK_END)
    body = strip_block(config)  # line ends kept as they are
    if body and not body.endswith("\n"):
        body += eol
    return body + eol.join(lines) + eol


class PiDeploy:
    def __init__(self, board: Board, bundle: Bundle, *, try_first: bool = True, timeout_s: float = 300,
                 on_step: Callable[[str], None] | None = None, on_wait: Callable[[float], None] | None = None):
        self.board, self.bundle = board, bundle
        self.try_first, self.timeout_s = try_first, timeout_s
        self.on_wait = on_wait
        self.steps = Steps(on_step)
        self.t = board.t
        self.release = bundle.release

    # -- paths on the board ------------------------------------------------
    def boot(self, rel: str = "") -> str:
        return self.board.path(f"{self.facts.boot_dir}/{rel}".rstrip("/"))

    @property
    def staging(self) -> str:
        return self.board.path(f"{STAGING}/{self.release}")

    @property
    def modules(self) -> str:
        return self.board.path(f"/lib/modules/{self.release}")

    def sh(self, script: str, *args: str, step: str) -> None:
        """A fixed script with its paths as arguments (never pasted into it)."""
        self.t.run(["sh", "-c", script, "sh", *args], sudo=True, check=True, step=step)

    # -- checks before anything changes ----------------------------------------
    def check(self) -> None:
        b, f = self.bundle, self.board.facts()
        self.facts = f
        b.verify()
        name = self.board.name
        if f.machine not in b.manifest["machines"]:
            raise UserError(f"{name} is {f.machine} but the bundle is for {', '.join(b.manifest['machines'])} "
                            f"(board {b.board}): build for this board with `rtforge kernel build --board ...`")
        if not f.model or not any(f.model.startswith(m) for m in b.manifest["models"]):
            raise UserError(f"{name} is a '{f.model or 'board without a device-tree model'}', but the bundle is "
                            f"for {', '.join(b.manifest['models'])}: deploy a bundle built for this model")
        self.model = bootcfg_model(f.model)
        if f.boot_dir is None:
            raise UserError(f"{name} has no config.txt in /boot/firmware or /boot: this is not a Raspberry Pi "
                            "firmware boot partition (for a GRUB board, deploy the .deb)")
        if f.release == self.release:
            raise UserError(f"{name} is running {self.release} already: its modules cannot be replaced while "
                            "it runs; build with another version or boot another kernel first")
        if self.try_first and not f.tryboot_supported:
            raise UserError(f"the firmware of {name} has no tryboot (no {self.board.path('/proc/device-tree/chosen/bootloader/tryboot')}): "
                            "update it (sudo apt full-upgrade; rpi-eeprom-update on a Pi 4/5), or use --no-try "
                            "and accept that a kernel that does not boot needs the SD card in another computer")
        boot_kb = sum((b.root / p).stat().st_size for p in b.boot_files()) // 1024 + MARGIN_KB
        if f.boot_free_kb is not None and f.boot_free_kb < boot_kb:
            raise UserError(f"the boot partition of {name} has {f.boot_free_kb} KiB free, the kernel needs "
                            f"{boot_kb} KiB: remove old kernels (`rtforge kernels {name} --remove RELEASE`)")
        if f.root_free_kb is not None and f.root_free_kb < 2 * b.size_kb:
            raise UserError(f"/ on {name} has {f.root_free_kb} KiB free, {2 * b.size_kb} KiB are needed "
                            "(staging plus modules): free some space")
        self.warnings = [w for w in [f.panic_warning("cmdline.txt")] if w]
        self.files = RemoteBootFiles(self.board, f.boot_dir)
        self.before = resolve(self.files, self.model)
        self.config_path = self.boot("config.txt")
        self.old_config = self.t.read_bytes(self.config_path, sudo=True, step="reading config.txt")
        self.new_config = with_block(self.old_config.decode("utf-8", "replace"), b, b.manifest["arch"] == "arm64")

    # -- the steps ---------------------------------------------------------------
    def upload(self) -> None:
        def put():
            self.sh('rm -rf "$1" && mkdir -p "$1"', self.staging, step="upload")
            self.t.put_tree(self.bundle.root, self.staging, sudo=True, step="upload")
        self.steps.run("upload", put, lambda: self.sh('rm -rf "$1"', self.staging, step="cleanup"))

        def verify():
            out = self.t.run(["sh", "-c", 'cd "$1" && find . -type f ! -name manifest.json -exec sha256sum {} +',
                              "sh", self.staging], sudo=True, check=True, step="verify upload").stdout
            got = {line[66:].removeprefix("./"): line[:64] for line in out.splitlines()}
            if got != self.bundle.files:
                bad = sorted(k for k in set(got) | set(self.bundle.files) if got.get(k) != self.bundle.files.get(k))
                raise UserError(f"the upload to {self.board.name} is damaged ({len(bad)} files differ, e.g. "
                                f"{bad[0]}): check the board's storage and network, then deploy again")
        self.steps.run("verify upload", verify)

    def install(self) -> None:
        mods, staged = self.modules, f"{self.staging}/{self.bundle.module_dir()}"
        # An earlier copy of the same release is set aside, not lost, until the commit.
        self.steps.run(
            "install modules",
            lambda: self.sh('[ ! -e "$1" ] || mv "$1" "$1.rtforge-old"; cp -a "$2" "$1.rtforge-new" && mv "$1.rtforge-new" "$1"',
                            mods, staged, step="install modules"),
            lambda: self.sh('rm -rf "$1" "$1.rtforge-new"; [ ! -e "$1.rtforge-old" ] || mv "$1.rtforge-old" "$1"',
                            mods, step="cleanup"))
        pdir = self.boot(prefix_for(self.release))
        cmdline = self.before.cmdline_file
        # its name inside the new prefix: without the prefix it is read from now
        name_in_prefix = cmdline[len(self.before.os_prefix):] if cmdline and self.before.os_prefix and \
            cmdline.startswith(self.before.os_prefix) else cmdline
        manifest = json.dumps(self.bundle.manifest, indent=1, sort_keys=True).encode()

        def boot_files():
            self.sh('[ ! -e "$1" ] || mv "$1" "${1%/}.rtforge-old"; mkdir -p "$1" && cp -r "$2/boot/." "$1"',
                    pdir, self.staging, step="install kernel")
            if cmdline:  # the firmware reads cmdline.txt from the os_prefix directory too
                self.sh('cp "$1" "$2"', self.boot(cmdline), f"{pdir}/{name_in_prefix}", step="install kernel")
            self.t.write_bytes(f"{pdir}/rtforge.json", manifest, sudo=True, step="install kernel")
        self.steps.run("install kernel", boot_files,
                       lambda: self.sh('rm -rf "$1"; [ ! -e "${1%/}.rtforge-old" ] || mv "${1%/}.rtforge-old" "$1"',
                                       pdir, step="cleanup"))

    def check_with_model(self, text: str, tryboot: bool) -> BootChoice:
        """What the firmware will load from this text, before it is written."""
        self.files = RemoteBootFiles(self.board, self.facts.boot_dir)  # see the files just installed
        choice = resolve_text(text, self.files, self.model, tryboot=tryboot)
        want = prefix_for(self.release) + self.bundle.image
        new_warnings = [w for w in choice.warnings if w not in self.before.warnings]
        if choice.kernel != want or not (choice.dtb or "").startswith(prefix_for(self.release)) or new_warnings:
            why = "; ".join(new_warnings) or f"it would load kernel {choice.kernel} and dtb {choice.dtb}"
            raise UserError(f"the boot files are wrong, so nothing was rebooted: {why}")
        return choice

    def write_boot_config(self) -> None:
        name = "tryboot.txt" if self.try_first else "config.txt"
        self.check_with_model(self.new_config, tryboot=self.try_first)
        path = self.boot(name)
        old = self.t.read_bytes(path, sudo=True) if self.t.exists(path) else None
        if not self.try_first:
            self.backup = self._backup()
        undo = (lambda: self.t.write_bytes(path, old, sudo=True, step="cleanup")) if old is not None else \
            (lambda: self.sh('rm -f "$1"', path, step="cleanup"))
        self.steps.run(f"write {name}", lambda: self.t.write_bytes(path, self.new_config.encode(), sudo=True,
                                                                   step=f"write {name}"), undo)

    def _backup(self) -> str:
        name = f"config.txt.rtforge-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
        self.t.write_bytes(self.boot(name), self.old_config, sudo=True, step="back up config.txt")
        return name

    # -- reboot, verify, commit ------------------------------------------------
    def reboot_and_verify(self) -> tuple[BoardFacts | None, list[str]]:
        self.steps.run("reboot" + (" into the try" if self.try_first else ""),
                       lambda: self.board.reboot(tryboot=self.try_first))
        if not self.board.wait_back(self.facts.boot_id, self.timeout_s, self.on_wait):
            return None, []
        after = self.board.facts()
        problems = []
        if after.release != self.release:
            problems.append(f"it runs {after.release}, not {self.release}")
        marker = self.bundle.manifest["uname_v_marker"]
        if marker not in after.version.split():
            problems.append(f"uname -v lacks {marker} ({after.version})")
        if after.realtime is not None and after.realtime != 1:
            problems.append(f"/sys/kernel/realtime is {after.realtime}")
        if self.try_first and after.tryboot_now is False and after.release == self.release:
            problems.append("the boot was not the try")
        return after, problems

    def commit(self) -> BootChoice:
        self.backup = getattr(self, "backup", None) or self._backup()
        self.t.write_bytes(self.config_path, self.new_config.encode(), sudo=True, step="commit")
        self.files = RemoteBootFiles(self.board, self.facts.boot_dir)
        now = resolve(self.files, self.model)
        self.sh('rm -f "$1"; rm -rf "$2" "$3.rtforge-old" "${4%/}.rtforge-old"', self.boot("tryboot.txt"),
                self.staging, self.modules, self.boot(prefix_for(self.release)), step="tidy up")
        self.steps.keep()
        return now


def checked_then_run(d, run: Callable[..., DeployResult]) -> DeployResult:
    """Every deploy: its checks (nothing on the board changes if they fail),
    then its steps; the checks' warnings travel with the result."""
    d.check()
    result = run(d)
    result.warnings = d.warnings
    return result


def deploy_pi(board: Board, bundle: Bundle, **kw) -> DeployResult:
    return checked_then_run(PiDeploy(board, bundle, **kw), _deploy_pi)


def _deploy_pi(d: PiDeploy) -> DeployResult:
    board, bundle = d.board, d.bundle
    name, rel = board.name, bundle.release

    def before_reboot():
        d.upload()
        d.install()
        d.write_boot_config()
    d.steps.guarded(before_reboot, f"config.txt is untouched, so {name} still boots its previous kernel")
    after, problems = d.reboot_and_verify()
    old = d.before.kernel
    if after is None:
        how = ("config.txt is untouched, so after a power cycle it boots its previous kernel "
               f"({old}); the new kernel stays under {prefix_for(rel)} for inspection") if d.try_first else \
              ("without tryboot there is no automatic way back: put its SD card in another computer and copy "
               f"{d.backup} over config.txt (`rtforge bootcheck` shows what would boot)")
        return DeployResult(False, "not-back", rel, f"{name} did not come back within {d.timeout_s:.0f} s: {how}")
    if problems and after.release == rel:
        # Only the boot configuration is undone: the running kernel's files stay.
        d.steps.unwind(only=lambda step: step.startswith("write"))
        config = "unchanged" if d.try_first else "restored"
        return DeployResult(False, "not-verified", rel,
                            f"{name} runs {rel} for this boot only, but {'; '.join(problems)}: config.txt is "
                            f"{config}, so `sudo reboot` returns it to {old}", running=after.release)
    if problems:
        not_undone = d.steps.unwind()
        left = f" (could not remove: {'; '.join(not_undone)})" if not_undone else ""
        return DeployResult(False, "fell-back", rel,
                            f"{name} came back on its previous kernel {after.release}: the new kernel did not boot, "
                            f"so the firmware fell back; config.txt is untouched and {rel} was removed{left}",
                            running=after.release, not_undone=not_undone)
    now = d.commit()
    return DeployResult(True, "committed", rel,
                        f"{name} runs {rel} ({bundle.manifest['uname_v_marker']}) and now boots it by default: "
                        f"kernel {now.kernel}, dtb {now.dtb}; the previous config.txt is saved as {d.backup} "
                        f"(`rtforge rollback {name}` restores it)", running=after.release, now_boots=now)
