"""A QEMU x86_64 guest (TCG) that is a real Debian/GRUB board for the tests.

The guest boots from its own disk through SeaBIOS and GRUB, exactly as a PC
does, and runs Debian's sshd; the host reaches it through a QEMU user-network
port forward on loopback.  Its serial console (SeaBIOS, GRUB, kernel,
systemd) is logged to a file, which is how a test sees what really booted:
every firmware start prints the SeaBIOS banner and every kernel prints
"Linux version RELEASE", including kernels that then panic.

QEMU keeps running across guest reboots (no -no-reboot), so a guest that
reboots itself -- `reboot`, a panic with panic=N -- comes back by itself, as a
board does.  The disk given to ``Guest`` is used as is; ``start_guest`` puts a
throwaway qcow2 overlay on top of the cached base image so that nothing a
test does reaches the cache.

The image itself is built by tests/guestimage.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .procs import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .guestimage import GuestImage
    from .rtguest import DeployedImage

QEMU = "qemu-system-x86_64"
FIRMWARE_BANNER = "SeaBIOS (version"
SUDO_USER = "rtforge-ci"  # created in the image with passwordless sudo
_KERNEL_RE = re.compile(r"Linux version (\S+) ")
_GRUB_BOOT_RE = re.compile(r"Booting `(.*?)'")
# menuentry/submenu lines of a grub.cfg made by grub-mkconfig: title and id
_MENU_RE = re.compile(r"^(\s*)(menuentry|submenu) '((?:[^'\\]|'\\'')*)'.*?\$menuentry_id_option '([^']+)'")

# Under TCG a boot to SSH takes ~25 s on an idle 2-core host (measured) and
# several times that while other sessions build kernels.  Waits are generous
# because a timeout here must mean "did not boot", not "the host was busy".
BOOT_TIMEOUT_S = 900


class GuestError(RuntimeError):
    """The guest did not do what a board must (boot, answer SSH, power off)."""


def die_with_parent() -> None:  # between fork and exec: QEMU must not outlive pytest
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def grub_menu(cfg: str) -> list[tuple[str, str]]:
    """(title, id for grub-reboot/grub-set-default) of every boot entry in a
    grub.cfg; an entry inside a submenu gets GRUB's "submenu>entry" id."""
    entries, submenu = [], None
    for line in cfg.splitlines():
        m = _MENU_RE.match(line)
        if not m:
            if line.startswith("}"):  # a top-level block (the submenu) ends
                submenu = None
            continue
        indent, kind, title, ident = m.groups()
        if kind == "submenu":
            submenu = ident
        elif indent and submenu:
            entries.append((title, f"{submenu}>{ident}"))
        else:
            entries.append((title, ident))
    return entries


class Guest:
    """One running QEMU guest.  Attributes a test uses: ``ssh_config`` (Host
    alias ``guest``), ``console_log``, ``port``, ``dir``."""

    def __init__(self, dir: Path, disk: Path, key: Path, host_key: str, *, disk_format: str = "qcow2",
                 memory_mb: int = 1024, cpus: int = 1, kernel: Path | None = None, initrd: Path | None = None,
                 append: str | None = None):
        self.dir = Path(dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.disk, self.disk_format, self.key, self.host_key = Path(disk), disk_format, Path(key), host_key
        self.memory_mb, self.cpus = memory_mb, cpus
        self.kernel, self.initrd, self.append = kernel, initrd, append
        self.console_log = self.dir / "console.log"
        self.ssh_config = self.dir / "ssh_config"
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.boot_s: float | None = None  # seconds from QEMU start to SSH (start_guest)

    # -- life cycle -----------------------------------------------------
    def _argv(self) -> list[str]:
        argv = [
            QEMU, "-accel", "tcg", "-machine", "pc", "-m", str(self.memory_mb), "-smp", str(self.cpus),
            # -nographic (not -display none): with a VGA card but no display,
            # SeaBIOS mirrors its screen to the serial port, so each firmware
            # start (each reset) shows up in the console log.
            "-nographic", "-monitor", "none", "-no-user-config",
            # append: the log keeps every boot of this guest, one after the other
            "-chardev", f"file,id=con,path={self.console_log},append=on", "-serial", "chardev:con",
            # cache=unsafe: the disk is a throwaway overlay (or a build in
            # progress), so host-side fsync buys nothing and costs seconds
            "-drive", f"file={self.disk},format={self.disk_format},if=virtio,cache=unsafe",
            "-netdev", f"user,id=net0,hostfwd=tcp:127.0.0.1:{self.port}-:22",
            # romfile= drops the iPXE option ROM: nothing boots from the network
            "-device", "virtio-net-pci,netdev=net0,romfile=",
            "-device", "virtio-rng-pci",  # sshd must not wait for entropy
        ]
        if self.kernel:  # direct kernel boot: only while the image is built
            argv += ["-kernel", str(self.kernel), "-initrd", str(self.initrd), "-append", self.append or ""]
        return argv

    def start(self) -> Guest:
        for _ in range(5):  # the free port may be taken before QEMU binds it
            self.port = free_port()
            err = self.dir / "qemu.err"
            with open(err, "wb") as errf:
                self.proc = subprocess.Popen(self._argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=errf, preexec_fn=die_with_parent)
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                break  # still running: it has its port
            if "host forwarding" not in err.read_text():
                raise GuestError(f"QEMU failed to start: {err.read_text().strip()}")
        else:
            raise GuestError("QEMU found no free port for the SSH forward")
        self._write_ssh_config()
        return self

    def _write_ssh_config(self) -> None:
        known = self.dir / "known_hosts"
        known.write_text(f"[127.0.0.1]:{self.port} {self.host_key}\n")
        # Host-key checking stays on, as for a user's board: the guest's key
        # is fixed when the image is built and recorded next to it.
        # `guest` logs in as root, `guest-sudo` as a user with passwordless sudo.
        self.ssh_config.write_text("\n".join(f"""\
Host {alias}
  HostName 127.0.0.1
  Port {self.port}
  User {user}
  IdentityFile {self.key}
  IdentitiesOnly yes
  UserKnownHostsFile {known}
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR
""" for alias, user in (("guest", "root"), ("guest-sudo", SUDO_USER))))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Pull the plug (the overlay is thrown away, nothing to save)."""
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def poweroff(self, timeout: float = 300) -> None:
        """Shut down cleanly from inside and wait for QEMU to exit: the disk
        is then consistent (needed when the image is being built)."""
        self.ssh("systemctl poweroff", timeout=60, check=False)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise GuestError(f"the guest did not power off within {timeout:.0f} s\n{self.console_tail()}") from None

    # -- talking to it ----------------------------------------------------
    def ssh_argv(self, command: str | list[str]) -> list[str]:
        """ssh argv running command (a shell string, or an argv joined with
        spaces: quote it yourself) on the guest."""
        cmd = command if isinstance(command, str) else " ".join(command)
        return ["ssh", "-F", str(self.ssh_config), "guest", "--", cmd]

    def ssh(self, command: str | list[str], *, timeout: float = 120, check: bool = True,
            input: bytes | None = None) -> subprocess.CompletedProcess:
        r = subprocess.run(self.ssh_argv(command), input=input, capture_output=True, timeout=timeout)
        r.stdout, r.stderr = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
        if check and r.returncode:
            raise GuestError(f"`{command}` failed on the guest ({r.returncode}): {r.stderr.strip() or r.stdout}")
        return r

    def put(self, local: Path, remote: str, timeout: float = 600) -> None:
        subprocess.run(["scp", "-q", "-F", str(self.ssh_config), str(local), f"guest:{remote}"],
                       check=True, timeout=timeout)

    def wait_ssh(self, timeout: float = BOOT_TIMEOUT_S) -> float:
        """Wait until sshd answers; returns the seconds waited."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if not self.alive():
                raise GuestError(f"QEMU exited ({self.proc.returncode}) while waiting for SSH\n{self.console_tail()}")
            try:
                if self.ssh("true", timeout=30, check=False).returncode == 0:
                    return time.monotonic() - t0
            except subprocess.TimeoutExpired:
                pass
            time.sleep(2)
        raise GuestError(f"no SSH from the guest within {timeout:.0f} s\n{self.console_tail()}")

    # -- what the console shows -----------------------------------------
    def console(self) -> str:
        try:
            return self.console_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def console_tail(self, lines: int = 25) -> str:
        tail = self.console().replace("\r", "").splitlines()[-lines:]
        return "console (last lines):\n  " + "\n  ".join(tail)

    def firmware_starts(self) -> int:
        return self.console().count(FIRMWARE_BANNER)

    def reboot_count(self) -> int:
        """Resets since QEMU started: every one, clean or after a panic."""
        return max(self.firmware_starts() - 1, 0)

    def boots(self) -> list[str]:
        """Release of every kernel that started, in order (also those that
        panicked afterwards)."""
        return _KERNEL_RE.findall(self.console())

    def grub_boots(self) -> list[str]:
        """Title of every GRUB menu entry booted, in order: which entry GRUB
        chose (the default, or a one-time grub-reboot entry)."""
        # Entering a submenu prints a "Booting" line too; Debian's one is
        # "Advanced options for ..." and boots nothing itself.
        return [t for t in _GRUB_BOOT_RE.findall(self.console()) if not t.startswith("Advanced options for ")]

    def wait_reboot(self, since: int, timeout: float = BOOT_TIMEOUT_S) -> float:
        """Wait for a reset after reboot_count() was `since`, then for SSH;
        returns seconds.  Seeing the reset first means SSH cannot be answered
        by the old system while it shuts down."""
        t0 = time.monotonic()
        while self.reboot_count() <= since:
            if not self.alive():
                raise GuestError(f"QEMU exited ({self.proc.returncode}) instead of rebooting\n{self.console_tail()}")
            if time.monotonic() - t0 > timeout:
                raise GuestError(f"the guest did not reboot within {timeout:.0f} s\n{self.console_tail()}")
            time.sleep(1)
        self.wait_ssh(timeout - (time.monotonic() - t0))
        return time.monotonic() - t0

    def reboot(self, timeout: float = BOOT_TIMEOUT_S) -> float:
        """`systemctl reboot` inside the guest, then wait for it to come back."""
        since = self.reboot_count()
        # The connection may drop before ssh gets an exit status: ignore it.
        self.ssh("systemctl reboot", timeout=60, check=False)
        return self.wait_reboot(since, timeout)

    # -- GRUB on the guest --------------------------------------------------
    def grub_entries(self) -> list[tuple[str, str]]:
        return grub_menu(self.ssh("cat /boot/grub/grub.cfg").stdout)

    def grub_entry(self, release: str) -> str:
        """The id of the normal (not recovery) entry that boots release."""
        ids = [i for t, i in self.grub_entries() if t.endswith(f" {release}")]
        if len(ids) != 1:
            raise GuestError(f"grub.cfg has {len(ids)} entries for {release}: {self.grub_entries()}")
        return ids[0]

    def grubenv(self) -> dict[str, str]:
        out = self.ssh("grub-editenv list").stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@contextlib.contextmanager
def running_guest(image: GuestImage | DeployedImage, dir: Path, **kw) -> Iterator[Guest]:
    """start_guest for a fixture: stopped afterwards, its overlay removed
    (up to ~0.6 GiB after a kernel install; pytest keeps the last runs'
    tmp dirs, and with them the console log)."""
    g = start_guest(image, dir, **kw)
    try:
        yield g
    finally:
        g.stop()
        (g.dir / "disk.qcow2").unlink(missing_ok=True)


def start_guest(image: GuestImage | DeployedImage, dir: Path, *, cpus: int | None = None,
                memory_mb: int = 1024) -> Guest:
    """Boot a pristine copy of the cached image, or of a deployed one
    (through a qcow2 overlay in dir), and wait for SSH.  One vCPU by
    default: a second one boots ~25 % faster (19 s instead of 25 s to SSH,
    measured idle) but takes the second host core from everyone else;
    RTFORGE_GUEST_CPUS=2 chooses it."""
    cpus = cpus or int(os.environ.get("RTFORGE_GUEST_CPUS", "1"))
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    overlay = dir / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(image.disk), str(overlay)],
                   check=True)
    guest = Guest(dir, overlay, image.key, image.host_key, cpus=cpus, memory_mb=memory_mb).start()
    try:
        guest.boot_s = guest.wait_ssh()
    except BaseException:
        guest.stop()
        raise
    return guest
