"""Installing a kernel .deb on a Debian/GRUB board: the same try-once rule.

GRUB's one-shot is `grub-reboot ENTRY` (the next boot only; it needs
GRUB_DEFAULT=saved), its commit is `grub-set-default ENTRY`:

  check the .deb and the board (nothing changes yet)
  -> pin the running kernel as GRUB's saved default (installing a newer
     kernel must not make it the default behind our back)
  -> upload to a staging directory, re-check sha256 there
  -> install with apt (dependencies, initramfs, update-grub by Debian's hooks)
  -> find the new kernel's menu entry in grub.cfg -> grub-reboot it -> reboot
  -> verify: uname -r, the RT marker in uname -v, /sys/kernel/realtime
  -> commit: grub-set-default the new entry.

Every step before the reboot undoes itself when a later one fails.  A kernel
that does not boot (or panics: keep panic=N on the kernel command line so it
resets) leaves GRUB on the saved default: the old kernel.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import UserError
from .board import Board
from .bundle import sha256_file
from .deploy import DeployResult, checked_then_run
from .steps import Steps

STAGING = "/var/tmp/rtforge-staging"
DEB_ARCH = {"amd64": "x86_64", "arm64": "aarch64", "armhf": "armv7l", "armel": "armv6l", "i386": "i686"}


@dataclass
class KernelDeb:
    path: Path
    package: str
    version: str
    arch: str
    release: str        # from the package name linux-image-<release>

    @property
    def sha256(self) -> str:
        return sha256_file(self.path)


def read_deb(path: Path) -> KernelDeb:
    if not path.is_file():
        raise UserError(f"{path}: no such file; give a linux-image-<release>_*.deb (or a bundle for a Raspberry Pi)")
    r = subprocess.run(["dpkg-deb", "--field", str(path), "Package", "Version", "Architecture"],
                       capture_output=True, text=True)
    if r.returncode:
        raise UserError(f"{path} is not a readable Debian package: {r.stderr.strip()}")
    fields = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines() if ": " in line)
    package = fields.get("Package", "")
    if not package.startswith("linux-image-") or package.endswith("-dbg"):
        raise UserError(f"{path} is {package or 'a package'}, not a kernel image package (linux-image-<release>)")
    if not package.removeprefix("linux-image-")[:1].isdigit():
        raise UserError(f"{path} is the metapackage {package}: give the kernel's own package, "
                        "linux-image-<release>_*.deb, which it depends on")
    return KernelDeb(path, package, fields.get("Version", "?"), fields.get("Architecture", "?"),
                     package.removeprefix("linux-image-"))


def menu_entries(grub_cfg: str) -> dict[str, str]:
    """{kernel release: grub-reboot argument} for the Linux entries of grub.cfg.

    Entries in the "Advanced options" submenu ("SUBMENU_ID>ENTRY_ID") name
    one kernel for good; Debian's first, simple entry always means "the
    newest kernel", so it is used only when there is nothing better."""
    out: dict[str, str] = {}
    submenu, sub_depth, depth, current = None, 0, 0, None
    for line in grub_cfg.splitlines():
        s = line.strip()
        if m := re.match(r"submenu\s.*\$menuentry_id_option\s+'([^']+)'", s):
            submenu, sub_depth = m[1], depth
        elif m := re.match(r"menuentry\s.*\$menuentry_id_option\s+'([^']+)'", s):
            current = f"{submenu}>{m[1]}" if submenu else m[1]
        elif (m := re.match(r"linux\s+\S*vmlinuz-(\S+)", s)) and current and "recovery" not in current:
            if m[1] not in out or (">" in current and ">" not in out[m[1]]):
                out[m[1]] = current
        depth += s.count("{") - s.count("}")
        if submenu and depth <= sub_depth:
            submenu = None
    return out


class GrubDeploy:
    def __init__(self, board: Board, deb: KernelDeb, *, timeout_s: float = 300,
                 on_step: Callable[[str], None] | None = None, on_wait: Callable[[float], None] | None = None):
        self.board, self.deb, self.t = board, deb, board.t
        self.timeout_s, self.on_wait = timeout_s, on_wait
        self.steps = Steps(on_step)

    def grub_cfg(self) -> str:
        return self.t.read_text(self.board.path("/boot/grub/grub.cfg"), sudo=True, step="reading grub.cfg")

    def grubenv(self) -> dict[str, str]:
        out = self.t.run(["grub-editenv", self.board.path("/boot/grub/grubenv"), "list"], sudo=True).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def check(self) -> None:
        f = self.board.facts()
        self.facts = f
        name = self.board.name
        if not f.grub:
            raise UserError(f"{name} has no grub-reboot: this .deb path is for GRUB boards (a Raspberry Pi takes a bundle)")
        if DEB_ARCH.get(self.deb.arch) != f.machine:
            raise UserError(f"{name} is {f.machine} but {self.deb.path.name} is for {self.deb.arch}: "
                            "build for this board")
        if f.release == self.deb.release:
            raise UserError(f"{name} is running {self.deb.release} already: boot another kernel before replacing it")
        default = self.t.run(["sh", "-c", '. "$1" 2>/dev/null; printf %s "$GRUB_DEFAULT"', "sh",
                              self.board.path("/etc/default/grub")]).stdout.strip()
        if default != "saved":
            raise UserError(f"{name} has GRUB_DEFAULT={default or '0'}: trying a kernel once needs GRUB_DEFAULT=saved "
                            "in /etc/default/grub (then run update-grub), so that grub-reboot can work")
        entries = menu_entries(self.grub_cfg())
        if f.release not in entries:
            raise UserError(f"the running kernel {f.release} has no entry in grub.cfg: run update-grub on {name} first")
        self.old_entry = entries[f.release]
        self.old_env = self.grubenv()
        self.warnings = [w for w in [f.panic_warning("GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub")] if w]

    def install(self) -> None:
        staged = self.board.path(f"{STAGING}/{self.deb.path.name}")

        def upload():
            self.t.run(["mkdir", "-p", self.board.path(STAGING)], sudo=True, check=True, step="upload")
            self.t.put(self.deb.path, staged, sudo=True, step="upload")
            got = self.t.sha256([staged], sudo=True, step="verify upload").get(staged)
            if got != self.deb.sha256:
                raise UserError(f"the upload to {self.board.name} is damaged ({self.deb.path.name} differs): "
                                "check the board's storage and network, then deploy again")
        self.steps.run("upload", upload, lambda: self.t.run(["rm", "-f", staged], sudo=True))
        # Pin the running kernel first: update-grub would otherwise make the
        # newest kernel entry 0, the default of a GRUB without saved_entry.
        old_saved = self.old_env.get("saved_entry")
        self.steps.run("pin the running kernel",
                       lambda: self.t.run(["grub-set-default", self.old_entry], sudo=True, check=True, step="pin"),
                       lambda: self.t.run(["grub-set-default", old_saved] if old_saved else
                                          ["grub-editenv", self.board.path("/boot/grub/grubenv"), "unset", "saved_entry"],
                                          sudo=True))
        self.steps.run(
            "install the package",
            lambda: self.t.run(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
                                "--no-install-recommends", staged], sudo=True, check=True, step="install the package",
                               timeout=1800),
            lambda: self.t.run(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "-q",
                                self.deb.package], sudo=True, timeout=900))
        entries = menu_entries(self.grub_cfg())
        if self.deb.release not in entries:
            raise UserError(f"after installing, grub.cfg has no entry for {self.deb.release}: is update-grub run by "
                            "the board's kernel hooks (/etc/kernel/postinst.d)?")
        self.new_entry = entries[self.deb.release]

    def reboot_and_verify(self):
        self.steps.run("grub-reboot into the try",
                       lambda: self.t.run(["grub-reboot", self.new_entry], sudo=True, check=True, step="grub-reboot"),
                       lambda: self.t.run(["grub-editenv", self.board.path("/boot/grub/grubenv"), "unset", "next_entry"],
                                          sudo=True))
        self.steps.run("reboot", lambda: self.board.reboot(tryboot=False))
        if not self.board.wait_back(self.facts.boot_id, self.timeout_s, self.on_wait):
            return None, []
        after = self.board.facts()
        problems = []
        if after.release != self.deb.release:
            problems.append(f"it runs {after.release}, not {self.deb.release}")
        elif "PREEMPT_RT" not in after.version.split():
            problems.append(f"uname -v lacks PREEMPT_RT ({after.version})")
        if after.realtime is not None and after.realtime != 1:
            problems.append(f"/sys/kernel/realtime is {after.realtime}")
        return after, problems


def deploy_grub(board: Board, deb: KernelDeb, **kw) -> DeployResult:
    return checked_then_run(GrubDeploy(board, deb, **kw), _deploy_grub)


def _deploy_grub(d: GrubDeploy) -> DeployResult:
    board, deb = d.board, d.deb
    name, rel = board.name, deb.release
    d.steps.guarded(d.install, "GRUB's default is the running kernel")
    after, problems = d.reboot_and_verify()
    if after is None:
        return DeployResult(False, "not-back", rel, f"{name} did not come back within {d.timeout_s:.0f} s: GRUB's "
                            f"default is still {d.facts.release}, so a reset boots it again (grub-reboot was for one "
                            "boot only)")
    if problems and after.release == rel:
        d.steps.unwind(only=lambda s: s.startswith("grub-reboot"))
        return DeployResult(False, "not-verified", rel, f"{name} runs {rel} for this boot only, but "
                            f"{'; '.join(problems)}: GRUB's default is still {d.facts.release}, so `sudo reboot` "
                            "returns to it", running=after.release)
    if problems:
        not_undone = d.steps.unwind(only=lambda s: s != "pin the running kernel")
        left = f" (could not undo: {'; '.join(not_undone)})" if not_undone else ""
        return DeployResult(False, "fell-back", rel, f"{name} came back on its previous kernel {after.release}: the "
                            f"new kernel did not boot, so GRUB used its default; {deb.package} was removed{left}",
                            running=after.release, not_undone=not_undone)
    board.t.run(["grub-set-default", d.new_entry], sudo=True, check=True, step="commit")
    board.t.run(["rm", "-rf", board.path(STAGING)], sudo=True)
    d.steps.keep()
    return DeployResult(True, "committed", rel, f"{name} runs {rel} (PREEMPT_RT) and GRUB now boots it by default "
                        f"({d.new_entry}); `grub-set-default '{d.old_entry}'` returns to {d.facts.release}",
                        running=after.release)
