"""A Debian bookworm arm64 root with gcc and make, run under qemu-user: the
board's own architecture, where an out-of-tree module is built against a
bundle's linux-headers package the way DKMS builds it on a Pi.

    root = arm64_root(dest)                       # a fresh copy of the cached root
    run_in_root(root, "dpkg -i /tmp/h.deb && make -C ...", log=...)

The root is made once by debootstrap (needs root): the first stage here, the
second stage -- the packages' own maintainer scripts, arm64 programs --
inside the root, through qemu-aarch64.  Nothing of this machine is changed
for that: the chroot runs in new user, mount, PID and network namespaces,
with a binfmt_misc instance of its own (Linux >= 6.7, as tests/support/
qemu_user.py explains) that hands arm64 programs to qemu-aarch64.  The user
namespace maps uids and gids 0-65535 to this machine's own (written by this
process, which as root may), so dpkg can give files to `mail` or `_apt` as
on a real system; device nodes cannot be made in a user namespace, so
debootstrap is told it runs in a container (container=lxc) and /dev comes
from this machine as a bind mount.

The cached root lives in <cache>/chroot/bookworm-arm64-<hash of its recipe>/
and is built under a lock in a .tmp folder renamed when complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rtforge import paths

from .fixturecache import fixture_cache
from .guestimage import MIRROR, _remove, _run_logged
from .qemu_user import binfmt_line

SUITE = "bookworm"
PACKAGES = ["gcc", "make", "libc6-dev", "kmod"]

# Inside the namespaces: wait for the uid map this process writes, then
# binfmt_misc, /proc, /dev and /sys for the chroot, then the command.
_ENTER = r"""
n=0; while [ "$(id -u)" != 0 ]; do n=$((n+1)); [ $n -lt 400 ] || exit 90; sleep 0.05; done
set -e
mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
printf '%s' "$BINFMT" > /proc/sys/fs/binfmt_misc/register
mount -t proc proc "$ROOT/proc"
mount --rbind /dev "$ROOT/dev"
mount -t sysfs sysfs "$ROOT/sys" 2>/dev/null || true
export QEMU_CPU
exec chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C container=lxc \
    /bin/sh -c "$SCRIPT"
"""


def _say(msg: str) -> None:
    print(f"[arm64 root] {msg}", file=sys.stderr, flush=True)


# What the root is made of: a change here makes a new root (a change of the
# code around it does not; bump RECIPE when the making itself changes).
RECIPE = 1


def recipe_hash() -> str:
    return hashlib.sha256(repr((RECIPE, SUITE, PACKAGES, MIRROR)).encode()).hexdigest()[:12]


def run_in_root(root: Path, script: str, *, log: Path | None = None, cpu: str = "cortex-a72",
                timeout: float = 3600, shell: str = "/bin/sh") -> subprocess.CompletedProcess:
    """`sh -c script` chrooted into root, as root of the namespaces above."""
    env = {**os.environ, "BINFMT": binfmt_line("aarch64"), "ROOT": str(root), "SCRIPT": script, "QEMU_CPU": cpu}
    argv = ["unshare", "--user", "--mount", "--pid", "--net", "--fork", "--kill-child", "sh", "-c", _ENTER]
    out = open(log, "a") if log else subprocess.PIPE
    try:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        _map_ids(proc.pid)
        stdout, _ = proc.communicate(timeout=timeout)
    finally:
        if log:
            out.close()
    return subprocess.CompletedProcess(argv, proc.returncode, stdout or "", "")


def _map_ids(pid: int) -> None:
    """Map uids and gids 0-65535 of pid's new user namespace to this machine's."""
    own = os.readlink("/proc/self/ns/user")
    deadline = time.monotonic() + 20
    while True:
        try:
            if os.readlink(f"/proc/{pid}/ns/user") != own:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("unshare did not make a user namespace within 20 s")
        time.sleep(0.01)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write("0 0 65536\n")


def arm64_root(dest: Path, progress=_say) -> Path:
    """A fresh copy of the cached root at dest (made first when missing)."""
    cached = ensure_root(progress=progress)
    subprocess.run(["cp", "-a", str(cached), str(dest)], check=True)
    return dest


def ensure_root(cache: Path | None = None, progress=_say) -> Path:
    base = Path(cache) / "chroot" if cache else fixture_cache("chroot")
    final = base / f"{SUITE}-arm64-{recipe_hash()}"
    if (final / "root" / "usr/bin/gcc").exists():
        return final / "root"
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "root" / "usr/bin/gcc").exists():
            return final / "root"
        if os.geteuid() != 0:
            raise RuntimeError("making the arm64 root needs root (debootstrap)")
        tmp = base / f"{final.name}.tmp"
        _remove(tmp)
        tmp.mkdir()
        t0 = time.monotonic()
        progress(f"making {final} (debootstrap arm64, the second stage under qemu-aarch64: minutes)")
        try:
            _build(tmp, progress)
        except BaseException:
            if (tmp / "build.log").exists():
                shutil.copy(tmp / "build.log", base / "last-failed-build.log")
                progress(f"failed; its log is {base / 'last-failed-build.log'}")
            _remove(tmp)
            raise
        os.rename(tmp, final)
        for old in base.glob(f"{SUITE}-arm64-*"):
            if old != final and not old.name.endswith(".tmp"):
                _remove(old)
        progress(f"done in {time.monotonic() - t0:.0f} s")
    return final / "root"


def _build(out: Path, progress) -> None:
    log = out / "build.log"
    root = out / "root"
    debs = paths.download_dir() / "debootstrap-arm64"
    debs.mkdir(parents=True, exist_ok=True)
    _run_logged(["debootstrap", "--foreign", "--arch=arm64", "--variant=minbase", f"--cache-dir={debs}",
                 f"--include={','.join(PACKAGES)}", SUITE, root, MIRROR], log, progress, "debootstrap (first stage)")
    p = run_in_root(root, "/debootstrap/debootstrap --second-stage", log=log, timeout=7200)
    if p.returncode:
        raise RuntimeError(f"debootstrap's second stage failed ({p.returncode}): see {log}")
    check = run_in_root(root, "gcc --version | head -n 1 && uname -m", timeout=600)
    if check.returncode or "aarch64" not in check.stdout:
        raise RuntimeError(f"the arm64 root does not run gcc: {check.stdout[-300:]}")
    with open(log, "a") as f:
        f.write(f"\n$ gcc --version; uname -m  (in the root)\n{check.stdout}\n")
    progress(f"  {shlex.quote(check.stdout.splitlines()[0])}")
