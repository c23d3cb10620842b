"""Installing a kernel bundle on a Raspberry Pi without ever bricking it.

The bundle (from `rtforge kernel build`) goes through the try-once template
(tryonce.py) with the firmware's tryboot (pitry.py):

  check    the bundle's sha256s, machine and model; space; not the running release
  upload   the bundle to STAGING/<release>, every sha256 checked against the manifest
  install  modules to /lib/modules/<release> (never the running kernel's), image,
           dtbs and overlays to <boot>/rtforge-<release>/ (used through os_prefix),
           with cmdline.txt and the manifest (rtforge.json); with --headers the
           bundle's linux-headers package through the board's apt (for DKMS)
  arm      tryboot.txt = config.txt + a block: os_prefix, kernel, arm_64bit
  verify   uname -r, the manifest's uname -v marker, /sys/kernel/realtime, the try flag
  commit   config.txt gets the block (after a backup).

Raspberry Pi's own RT kernel package takes the same path (official.py).
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import UserError
from ..firmware.bootcfg import BootChoice
from ..transport.device import Device
from ..transport.facts import DeviceFacts
from ..transport.transport import UploadDamaged
from .bundle import Bundle
from .pitry import PiPayload, PiTryboot
from .steps import Steps
from .tryonce import STAGING, DeployResult, Expect, make_staging, try_once

MARGIN_KB = 4096
APT_TIMEOUT_S = 1800


def prefix_for(release: str) -> str:
    return f"rtforge-{release}/"


def headers_deb(bundle: Bundle) -> str:
    """The bundle's headers package (its path in the bundle), or why there is none."""
    h = bundle.manifest.get("headers") or {}
    if not h.get("deb"):
        why = h.get("why") or "it was built before rtforge made headers packages"
        raise UserError(f"--headers: the bundle {bundle.release} has no headers package ({why}); "
                        "deploy without --headers")
    return str(h["deb"])


class BundlePayload(PiPayload):
    def __init__(self, bundle: Bundle, headers: bool = False):
        super().__init__()
        self.bundle = bundle
        self.release = bundle.release
        self.expect = Expect(what=bundle.release, release=bundle.release, marker=bundle.marker)
        # the headers package the build checked for this board (kernel/headers.py), when asked for
        self.headers = headers_deb(bundle) if headers else None
        if headers:
            self.tools = (*self.tools, "apt-get", "dpkg")

    @property
    def t(self):
        return self.mech.target.t

    def staging(self) -> str:
        return self.mech.target.path(f"{STAGING}/{self.release}")

    def modules(self) -> str:
        return self.mech.target.path(f"/lib/modules/{self.release}")

    def check(self, target: Device, f: DeviceFacts) -> None:
        b, name = self.bundle, target.name
        b.verify()
        if f.machine not in b.manifest["machines"]:
            raise UserError(f"{name} is {f.machine} but the bundle is for {', '.join(b.manifest['machines'])} "
                            f"(board {b.board}): build for this board with `rtforge kernel build --board ...`")
        if not b.fits(f.model):
            raise UserError(f"{name} is a '{f.model or 'board without a device-tree model'}', but the bundle is "
                            f"for {', '.join(b.manifest['models'])}: deploy a bundle built for this model")
        if f.release == self.release:
            raise UserError(f"{name} is running {self.release} already: its modules cannot be replaced while "
                            "it runs; build with another version or boot another kernel first")
        boot_kb = sum((b.root / p).stat().st_size for p in b.boot_files()) // 1024 + MARGIN_KB
        if f.boot_free_kb is not None and f.boot_free_kb < boot_kb:
            raise UserError(f"the boot partition of {name} has {f.boot_free_kb} KiB free, the kernel needs "
                            f"{boot_kb} KiB: remove old kernels (`rtforge kernels {name} --remove RELEASE`)")
        if f.root_free_kb is not None and f.root_free_kb < 2 * b.size_kb:
            raise UserError(f"/ on {name} has {f.root_free_kb} KiB free, {2 * b.size_kb} KiB are needed "
                            "(staging plus modules): free some space")

    def sh(self, script: str, *args: str, step: str) -> None:
        self.mech.sh(script, *args, step=step)

    def upload(self, steps: Steps) -> None:
        def put():
            make_staging(self.mech.target)
            self.sh('rm -rf "$1" && mkdir -- "$1"', self.staging(), step="upload")
            # held to the manifest's sums (which bundle.verify checked here)
            self.t.put_verified(self.bundle.root, self.staging(), expected=self.bundle.files, sudo=True, step="upload")
            # modes as a build makes them, whatever the folder had: root's to write, everyone's to read
            self.sh('chmod -R u=rwX,go=rX -- "$1"', self.staging(), step="upload")
        steps.run("upload", put, lambda: self.sh('rm -rf "$1"', self.staging(), step="cleanup"), partial=True)

    def install(self, steps: Steps) -> None:
        mods, staged = self.modules(), f"{self.staging()}/{self.bundle.module_dir()}"
        # An earlier copy of the same release is set aside, not lost, until the commit.
        steps.run(
            "install modules",
            lambda: self.sh('[ ! -e "$1" ] || mv "$1" "$1.rtforge-old"; '
                            'cp -a "$2" "$1.rtforge-new" && mv "$1.rtforge-new" "$1"', mods, staged,
                            step="install modules"),
            lambda: self.sh('rm -rf "$1" "$1.rtforge-new"; [ ! -e "$1.rtforge-old" ] || mv "$1.rtforge-old" "$1"',
                            mods, step="cleanup"))
        before = self.mech.before
        pdir = self.mech.boot(prefix_for(self.release))
        cmdline = before.cmdline_file
        # its name inside the new prefix: without the prefix it is read from now
        name_in_prefix = cmdline[len(before.os_prefix):] if cmdline and before.os_prefix and \
            cmdline.startswith(before.os_prefix) else cmdline
        manifest = self.bundle.manifest_bytes     # the very bytes that were checked, and their sha256 on the board

        def boot_files():
            self.sh('[ ! -e "$1" ] || mv "$1" "${1%/}.rtforge-old"; mkdir -p "$1" && cp -r "$2/boot/." "$1"',
                    pdir, self.staging(), step="install kernel")
            if cmdline:  # the firmware reads cmdline.txt from the os_prefix directory too
                self.sh('cp "$1" "$2"', self.mech.boot(cmdline), f"{pdir}/{name_in_prefix}", step="install kernel")
            self.t.write_bytes(f"{pdir}/rtforge.json", manifest, sudo=True, step="install kernel")
            got = self.t.sha256([f"{pdir}/rtforge.json"], sudo=True, step="install kernel")
            if got.get(f"{pdir}/rtforge.json") != self.bundle.manifest_sha256:
                raise UploadDamaged(f"the upload to {self.t.name} is damaged: {pdir}/rtforge.json differs from "
                                    "the manifest that was checked; check the board's storage, then try again")
        steps.run("install kernel", boot_files,
                  lambda: self.sh('rm -rf "$1"; [ ! -e "${1%/}.rtforge-old" ] || mv "${1%/}.rtforge-old" "$1"',
                                  pdir, step="cleanup"))
        if self.headers:
            # apt, not dpkg -i: it installs what the package depends on, and undoes cleanly
            target, deb = self.mech.target, f"{self.staging()}/{self.headers}"
            steps.run("install the headers",
                      lambda: self.t.run(target.apt_get("install", "--no-install-recommends", deb), sudo=True,
                                         check=True, step="install the headers", timeout=APT_TIMEOUT_S),
                      lambda: self.t.run(target.apt_get("purge", f"linux-headers-{self.release}"), sudo=True,
                                         timeout=900))

    def block_lines(self) -> list[str]:
        lines = [f"os_prefix={prefix_for(self.release)}", f"kernel={self.bundle.image}"]
        if self.bundle.manifest["arch"] == "arm64":
            lines.append("arm_64bit=1")  # a non-standard kernel name does not imply 64-bit
        # The bundle has no initramfs (the defconfigs build the SD card and root
        # filesystem drivers in); Bookworm's auto_initramfs=1 would otherwise
        # look for one named after the kernel.
        lines.append("auto_initramfs=0")
        return lines

    def block_label(self) -> str:
        return f"{self.release} ({self.bundle.board})"

    def wrong_choice(self, choice: BootChoice) -> str | None:
        want = prefix_for(self.release) + self.bundle.image
        if choice.kernel != want or not (choice.dtb or "").startswith(prefix_for(self.release)):
            return f"it would load kernel {choice.kernel} and dtb {choice.dtb}, not {want} and its dtb"
        return None

    def left_after_not_back(self) -> str:
        return f"; the new kernel stays under {prefix_for(self.release)} for inspection"

    def tidy(self) -> None:
        self.sh('rm -rf "$1" "$2.rtforge-old" "${3%/}.rtforge-old"', self.staging(), self.modules(),
                self.mech.boot(prefix_for(self.release)), step="tidy up")


def deploy_pi(target: Device, bundle: Bundle, *, try_first: bool = True, timeout_s: float = 300,
              on_step: Callable[[str], None] | None = None,
              on_wait: Callable[[float], None] | None = None, headers: bool = False) -> DeployResult:
    """Try a kernel bundle once on a Raspberry Pi; keep it when it verifies
    (with headers=True its linux-headers package is installed with it)."""
    return try_once(PiTryboot(target, BundlePayload(bundle, headers), try_first=try_first, timeout_s=timeout_s,
                              on_step=on_step, on_wait=on_wait))

