"""Installing a kernel .deb on a Debian/GRUB board: the try-once template
(tryonce.py) with GRUB's one-shot (grubtry.py):

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

import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import UserError
from ..transport.device import Device
from ..transport.facts import DeviceFacts
from ..transport.transport import sha256_file
from .grubtry import GrubTry
from .manifest import uname_v_marker
from .steps import Steps
from .tryonce import STAGING, DeployResult, Expect, Payload, make_staging, try_once

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
        out = proc.stdout
        assert out is not None, "stdout=PIPE always gives a pipe"
        try:
            with tarfile.open(fileobj=out, mode="r|") as tar:
                for member in tar:
                    # (a regular file's member always has a reader)
                    if member.name.lstrip("./") == want and member.isfile() and \
                            (data := tar.extractfile(member)) is not None:
                        return uname_v_marker(data.read().decode(errors="replace"))
        except tarfile.TarError:
            raise UserError(f"{deb.path} is damaged: its files cannot be read (dpkg-deb --fsys-tarfile)") from None
        finally:
            out.close()
            proc.kill()
    return None


class DebPayload(Payload):
    tools = (*Payload.tools, "apt-get", "dpkg")
    mech: GrubTry[DebPayload]

    def __init__(self, deb: KernelDeb):
        super().__init__()
        self.deb = deb
        self.expect = Expect(what=deb.release, release=deb.release)

    def staged(self) -> str:
        return self.mech.target.path(f"{STAGING}/{self.deb.path.name}")

    def check(self, target: Device, f: DeviceFacts) -> None:
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
            make_staging(self.mech.target)
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


def deploy_grub(target: Device, deb: KernelDeb, *, timeout_s: float = 300, on_step: Callable[[str], None] | None = None,
                on_wait: Callable[[float], None] | None = None) -> DeployResult:
    """Try a kernel .deb once on a GRUB board; keep it when it verifies."""
    return try_once(GrubTry(target, DebPayload(deb), timeout_s=timeout_s, on_step=on_step, on_wait=on_wait))
