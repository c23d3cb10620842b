"""Installing a kernel .deb on a Debian/GRUB board: the try-once template
(device/deploy/tryonce.py) with GRUB's one-shot, `grub-reboot ENTRY` (the next boot
only; it needs GRUB_DEFAULT=saved); the commit is `grub-set-default ENTRY`.

  check    the .deb (a kernel image package, this machine's architecture,
           its /boot/config-<release> says what uname -v must show) and the
           board (GRUB_DEFAULT=saved, an entry for the running kernel)
  pin      the running kernel as GRUB's saved default (installing a newer
           kernel must not make it the default behind our back)
  upload   to STAGING, sha256 checked there
  install  with apt (dependencies, initramfs, update-grub by Debian's hooks)
  arm      grub-reboot the new kernel's menu entry
  verify   the same rules as on a Pi: uname -r, the marker, /sys/kernel/realtime,
           and that the try booted (BOOT_IMAGE in /proc/cmdline)
  commit   grub-set-default the new entry.

A kernel that does not boot (or panics: keep panic=N on the kernel command
line so it resets) leaves GRUB on the saved default: the old kernel.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ...errors import UserError
from .bundle import sha256_file
from .steps import Steps
from ..transport.board import Target, TargetFacts
from .tryonce import STAGING, DeployResult, Expect, Mechanism, Payload, Phrases, try_once, uname_v_marker

APT_TIMEOUT_S = 1800
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


def deb_marker(deb: KernelDeb) -> str | None:
    """The uname -v marker the package's own /boot/config-<release> implies
    (its manifest, as far as a .deb has one); None when it has no config."""
    want = f"boot/config-{deb.release}"
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb.path)], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as proc:
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    if member.name.lstrip("./") == want and member.isfile():
                        return uname_v_marker(tar.extractfile(member).read().decode(errors="replace"))
        except tarfile.TarError:
            raise UserError(f"{deb.path} is damaged: its files cannot be read (dpkg-deb --fsys-tarfile)") from None
        finally:
            proc.stdout.close()
            proc.kill()
    return None


_SUBMENU_RE = re.compile(r"submenu\s.*\$menuentry_id_option\s+'([^']+)'")
_ENTRY_RE = re.compile(r"menuentry\s.*\$menuentry_id_option\s+'([^']+)'")


def grub_entries(grub_cfg: str) -> Iterator[tuple[str, list[str], bool]]:
    """Each menu entry of a grub.cfg written by grub-mkconfig: its grub-reboot
    argument ("SUBMENU_ID>ENTRY_ID" inside a submenu), its lines (stripped,
    from the menuentry line to its closing brace) and whether it is complete
    (a cut-off file ends inside one)."""
    submenu, sub_depth, depth, entry, block, start = None, 0, 0, "", None, 0
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


class DebPayload(Payload):
    tools = (*Payload.tools, "apt-get", "dpkg")

    def __init__(self, deb: KernelDeb):
        super().__init__()
        self.deb = deb
        self.expect = Expect(what=deb.release, release=deb.release)

    def staged(self) -> str:
        return self.mech.target.path(f"{STAGING}/{self.deb.path.name}")

    def check(self, target: Target, f: TargetFacts) -> None:
        name = target.name
        if DEB_ARCH.get(self.deb.arch) != f.machine:
            raise UserError(f"{name} is {f.machine} but {self.deb.path.name} is for {self.deb.arch}: "
                            "build for this board")
        if f.release == self.deb.release:
            raise UserError(f"{name} is running {self.deb.release} already: boot another kernel before replacing it")
        marker = deb_marker(self.deb)
        if marker is None:
            raise UserError(f"{self.deb.path.name} has no boot/config-{self.deb.release} with CONFIG_PREEMPT_RT=y: "
                            "it is not an RT kernel, which is what rtforge deploys")
        self.expect.marker = marker

    def upload(self, steps: Steps) -> None:
        t, staged = self.mech.target.t, self.staged()

        def put():
            t.run(["mkdir", "-p", self.mech.target.path(STAGING)], sudo=True, check=True, step="upload")
            t.put_verified(self.deb.path, staged, sudo=True, step="upload")
        steps.run("upload", put, lambda: t.run(["rm", "-f", staged], sudo=True), partial=True)

    def install(self, steps: Steps) -> None:
        target = self.mech.target
        steps.run(
            "install the package",
            lambda: target.t.run(target.apt_get("install", "--no-install-recommends", self.staged()), sudo=True,
                                 check=True, step="install the package", timeout=APT_TIMEOUT_S),
            lambda: target.t.run(target.apt_get("purge", self.deb.package), sudo=True, timeout=900))

    def removed(self) -> str:
        return f"{self.deb.package} was removed"

    def tidy(self) -> None:
        self.mech.target.t.run(["rm", "-rf", self.mech.target.path(STAGING)], sudo=True)


class GrubTry(Mechanism):
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

    def check(self) -> TargetFacts:
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

    def tried(self, after: TargetFacts) -> bool | None:
        image = boot_image(after.cmdline)
        return None if image is None else image == self.try_image

    def commit(self) -> tuple[str, None]:
        self.target.t.run(["grub-set-default", self.new_entry], sudo=True, check=True, step="commit")
        return (f"GRUB entry {self.new_entry}; `grub-set-default '{self.old_entry}'` returns to "
                f"{self.facts.release}"), None

    def phrases(self) -> Phrases:
        return Phrases("GRUB's default is untouched (grub-reboot was for one boot only)",
                       f"its previous kernel {self.facts.release}", "a reset", "GRUB used its default")


def deploy_grub(target: Target, deb: KernelDeb, *, timeout_s: float = 300, on_step: Callable[[str], None] | None = None,
                on_wait: Callable[[float], None] | None = None) -> DeployResult:
    """Try a kernel .deb once on a GRUB board; keep it when it verifies."""
    return try_once(GrubTry(target, DebPayload(deb), timeout_s=timeout_s, on_step=on_step, on_wait=on_wait))
