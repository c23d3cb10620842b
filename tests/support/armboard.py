"""An emulated Pi 1 user space as a board: Debian's armel busybox, run by
qemu-user as an ARM1176, reached through a Transport.

What runs on a real Pi 1 running a minimal system is what runs here: every
command rtforge sends (the runner, tar, sha256sum, setsid, the probe, the
benchmark) is an armel/armv6l program in a root holding only busybox and its
applets, executed instruction by instruction as the Pi 1's CPU.  Each
command enters new user and mount namespaces whose own binfmt_misc sends ARM
programs to qemu-user (tests/support/qemu_user.py), so nothing on this
machine changes; processes the runner leaves in the background keep their
namespaces.  A simulation of nothing but the CPU: the kernel is this
machine's (namespaced root, no SCHED_FIFO).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

from rtforge.device.transport.transport import Transport
from rtforge.kernel import debian, fetch

from .qemu_user import binfmt_line

ENTER = """set -e
mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
printf '%s' "$BINFMT" > /proc/sys/fs/binfmt_misc/register
for d in proc dev sys; do mount --rbind "/$d" "$ROOT/$d"; done
export QEMU_CPU
exec chroot "$ROOT" "$@"
"""


def armel_busybox() -> Path:
    """Debian's busybox-static for armel, fetched by rtforge's own apt (cached)."""
    apt = debian.PrivateApt(fetch.kernel_cache() / "apt-armel", arch="armel")
    apt.update(None)
    version, _ = apt.versions("busybox-static")[0]
    deb = apt.download("busybox-static", version, None)
    out = deb.with_name(deb.stem + ".busybox")
    if not out.exists():
        # ./bin/busybox up to bookworm, ./usr/bin/busybox in the merged-/usr packages of newer suites
        listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
        [member] = [w for line in listing.splitlines() for w in line.split()[-1:]
                    if w in ("./bin/busybox", "./usr/bin/busybox")]
        data = subprocess.run(f"dpkg-deb --fsys-tarfile {shlex.quote(str(deb))} | tar -xO {member}",
                              shell=True, capture_output=True, check=True).stdout
        out.write_bytes(data)
        out.chmod(0o755)
    return out


def make_root(root: Path, cpu: str) -> Path:
    """A root with busybox and its applets as the only programs."""
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "proc", "dev", "sys", "tmp", "var/tmp", "etc", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    (root / "bin" / "busybox").write_bytes(armel_busybox().read_bytes())
    (root / "bin" / "busybox").chmod(0o755)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "hostname").write_text("pi1-emulated\n")
    board = ArmBoard(root, cpu)
    r = board.run(["/bin/busybox", "--install", "-s"], check=True, step="installing busybox's applets")
    assert r.returncode == 0
    return root


class ArmBoard(Transport):
    def __init__(self, root: Path, cpu: str = "arm1176", machine: str = "armv6l"):
        super().__init__()
        self.root, self.cpu, self.machine = Path(root), cpu, machine
        self.name = f"an emulated {machine} board ({cpu})"

    def _env(self) -> dict:
        return {"PATH": "/bin:/sbin:/usr/bin:/usr/sbin", "HOME": "/root", "ROOT": str(self.root),
                "QEMU_CPU": self.cpu, "BINFMT": binfmt_line(self.machine), "LANG": "C"}

    def _argv(self, argv: list[str]) -> list[str]:
        return ["unshare", "--user", "--map-root-user", "--mount", "/bin/sh", "-c", ENTER, "enter", *argv]

    def _exec(self, argv, *, input, timeout):
        return subprocess.run(self._argv(argv), input=input, capture_output=True, timeout=timeout, env=self._env())

    def local_argv(self, argv):
        return self._argv(argv)

    def local_env(self):
        return self._env()

    def spawn(self, argv, *, log=None, errors_only=False):
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            return subprocess.Popen(self._argv(argv), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL if errors_only else out,
                                    stderr=out if errors_only else subprocess.STDOUT,
                                    start_new_session=True, env=self._env())
        finally:
            if log:
                out.close()

    def which(self, program):
        r = self._exec(["sh", "-c", 'command -v "$1"', "sh", program], input=None, timeout=60)
        return r.stdout.decode().strip() or None

    def is_root(self):
        return True

    def leftovers(self) -> list[int]:
        """Processes still running in this board's root (the runner's, after a test)."""
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.readlink(f"/proc/{name}/root") == str(self.root):
                        found.append(int(name))
                except OSError:
                    pass
        return found

    def kill_leftovers(self) -> None:
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


