"""Build, once, the disk image of the test guest: a Debian 12 amd64 "board"
that boots through SeaBIOS and GRUB (grub-pc) and runs sshd.

    python -m tests.guestimage          # build now (as root), with progress

Everything is real: debootstrap fetches Debian's packages, GRUB is Debian's
grub-pc installed by its own grub-install inside the guest, the kernels are
Debian's.  Nothing needs loop devices, mounting or KVM:

1. debootstrap a root tree (kernel, grub-pc, sshd, systemd) and configure it
   (keys, network, GRUB_DEFAULT=saved, serial console);
2. `mke2fs -d` writes that tree as an ext4 file system straight into the
   partition of a raw disk image (-E offset=), partitioned with sfdisk;
3. boot it once with QEMU's direct kernel boot (-kernel/-initrd from the
   tree) and run grub-install and update-grub inside it over SSH, then set
   the stock kernel as GRUB's saved default;
4. convert to qcow2 and boot it through SeaBIOS and GRUB on a throwaway
   overlay to prove it boots as a PC would, before anyone trusts it.

The guest has rtla 6.12 from bookworm-backports (auto-analysis, for
`latency --trace` on the RT kernel, whose config has the timerlat tracer).

Next to the image go the kernel packages a deploy test installs offline:
Debian's linux-image-rt-amd64 and the linux-image-*-rt-amd64 it depends on
(apt-get download on the host), and an unbootable kernel package (see
`_make_unbootable_deb`).

The result lives in <cache>/guest/debian12-amd64-<hash of this file>/: a
change of recipe makes a new name, so a stale image is never used.  A build
happens in a .tmp directory under a lock and is renamed only when complete,
so a failed or interrupted build leaves nothing that a later run trusts.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path

from rtforge import paths

from .fixturecache import fixture_cache
from .guest import SUDO_USER, Guest, die_with_parent, start_guest

SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
# minbase keeps the guest small (and its boot short under TCG); the rest is
# what a Debian PC board needs to boot through GRUB and be reached by SSH.
PACKAGES = ["linux-image-amd64", "grub-pc", "openssh-server", "systemd-sysv", "udev", "sudo", "kmod",
            "initramfs-tools", "zstd", "libtracefs1", "libtraceevent1"]
# `latency --trace` needs rtla with auto-analysis: bookworm's is 6.1 (none),
# bookworm-backports' 6.12 has it; the two libraries above are its dependencies.
RTLA = "rtla/bookworm-backports"
DISK_MIB = 4096    # sparse; the stock system uses ~0.9 GiB, the RT kernel adds ~0.5 GiB
PART_START_MIB = 1  # room before the partition for GRUB's core.img
# The kernel command line of every GRUB entry.  panic=10: a kernel that
# panics reboots after 10 s instead of hanging -- the watchdog a board needs so
# that a failed one-time boot (grub-reboot) falls back to the saved default.
CMDLINE = "console=ttyS0,115200n8 panic=10"
GRUB_DEFAULTS = f"""\
# rtforge test guest: boot the saved entry, so grub-reboot (once) and
# grub-set-default (permanently) choose the kernel; show everything on serial.
GRUB_DEFAULT=saved
GRUB_TIMEOUT=1
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="{CMDLINE}"
GRUB_TERMINAL=serial
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB_DISABLE_OS_PROBER=true
"""
# Timers and services that only cost boot time in a throwaway guest (and
# apt-daily would go to the network).
MASKED = ["apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
          "fstrim.timer", "e2scrub_reap.service", "getty-static.service"]


class BuildError(RuntimeError):
    pass


def recipe_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def default_cache() -> Path:
    return fixture_cache("guest")


@dataclass
class GuestImage:
    """A finished image and what the tests need to know about it."""
    dir: Path
    stock_release: str     # the kernel the guest boots by default, e.g. 6.1.0-50-amd64
    stock_entry: str       # its GRUB id (the saved default)
    root_uuid: str
    host_key: str          # "ssh-ed25519 AAAA..." of the guest's sshd
    rt_release: str        # e.g. 6.1.0-56-rt-amd64
    rt_debs: list[Path]    # linux-image-rt-amd64 and the linux-image-<rt_release> it depends on
    unbootable_release: str
    unbootable_deb: Path
    build_s: float

    @property
    def disk(self) -> Path:
        return self.dir / "disk.qcow2"

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    @classmethod
    def load(cls, dir: Path) -> GuestImage:
        m = json.loads((dir / "image.json").read_text())
        m["rt_debs"] = [dir / "debs" / n for n in m["rt_debs"]]
        m["unbootable_deb"] = dir / "debs" / m["unbootable_deb"]
        return cls(dir=dir, **m)


def _say(msg: str) -> None:
    print(f"[guest image] {msg}", file=sys.stderr, flush=True)


def ensure_image(cache: Path | None = None, progress=_say) -> GuestImage:
    """The cached image, built first when missing (needs root: debootstrap)."""
    base = Path(cache) if cache else default_cache()
    final = base / f"debian12-amd64-{recipe_hash()}"
    if (final / "image.json").exists():
        return GuestImage.load(final)
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another process is building the guest image; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "image.json").exists():
            return GuestImage.load(final)
        if os.geteuid() != 0:
            raise BuildError("building the guest image needs root (debootstrap, chroot)")
        tmp = base / f"{final.name}.tmp"
        _remove(tmp)  # a build that died before; we hold the lock, so nobody uses it
        tmp.mkdir()
        t0 = time.monotonic()
        progress(f"building {final} (cold: 4 min on an idle host, more when it is busy)")
        try:
            _build(tmp, progress, t0)
        except BaseException:
            if (tmp / "build.log").exists():
                shutil.copy(tmp / "build.log", base / "last-failed-build.log")
                progress(f"build failed; its log is {base / 'last-failed-build.log'}")
            _remove(tmp)
            raise
        os.rename(tmp, final)
        for old in base.glob("debian12-amd64-*"):  # images of older recipes
            if old != final:
                _remove(old)
        progress(f"done in {time.monotonic() - t0:.0f} s")
    return GuestImage.load(final)


def _remove(path: Path) -> None:
    if not path.exists():
        return
    # An interrupted debootstrap can leave /proc or /sys mounted inside its
    # tree: unmount those first, and never let rm descend into a mount.
    inside = str(path.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mnt in sorted((m for m in mounts if m.startswith(inside)), reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False)
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


def _run_logged(argv: list, log: Path, progress, label: str, *, timeout: float = 3600, **kw) -> None:
    """Run argv with its output appended to log, showing its latest line
    every 15 s so a long step visibly moves."""
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(map(str, argv))}\n")
        out.flush()
        proc = subprocess.Popen(list(map(str, argv)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", preexec_fn=die_with_parent, **kw)
        # A stalled download must end the build, not hang it.
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        t0 = shown = time.monotonic()
        tail: list[str] = []
        try:
            for line in proc.stdout:
                out.write(line)
                tail = (tail + [line.rstrip()])[-20:]
                if time.monotonic() - shown > 15:
                    progress(f"  {label} ({time.monotonic() - t0:.0f} s): {line.strip()[:100]}")
                    shown = time.monotonic()
        finally:
            watchdog.cancel()
        if proc.wait():
            raise BuildError(f"{label} failed ({proc.returncode}, after {time.monotonic() - t0:.0f} s of "
                             f"at most {timeout:.0f}):\n  " + "\n  ".join(tail))


def _build(out: Path, progress, t0: float) -> None:
    log = out / "build.log"

    def step(what: str) -> None:
        progress(f"[{time.monotonic() - t0:5.0f} s] {what}")

    step("downloading Debian's linux-image-rt-amd64 packages (apt-get download, host)")
    rt_release, rt_debs = _download_rt(out / "debs", log, progress)
    unbootable_release, unbootable_deb = _make_unbootable_deb(out / "debs", rt_debs[-1], rt_release, log, progress)

    root = out / "root"
    step(f"debootstrap {SUITE} ({len(PACKAGES)} packages + minbase; a few minutes)")
    # debootstrap's downloads are kept with rtforge's other downloads (a CI
    # machine keeps that folder between clean runs: RTFORGE_DOWNLOAD_CACHE)
    debs = paths.download_dir() / "debootstrap"
    debs.mkdir(parents=True, exist_ok=True)
    _run_logged(["debootstrap", "--variant=minbase", f"--cache-dir={debs}", f"--include={','.join(PACKAGES)}", SUITE,
                 root, MIRROR],
                log, progress, "debootstrap")
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise BuildError(f"expected one kernel in the debootstrapped /boot, found {kernels}")
    stock = kernels[0].name.removeprefix("vmlinuz-")
    root_uuid = str(uuidlib.uuid4())
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rtforge-test", "-f", str(out / "id_ed25519")],
                   check=True)

    step("installing rtla from bookworm-backports (apt-get download on the host, dpkg -i in the tree)")
    _run_logged(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", RTLA], log, progress,
                "apt-get download", cwd=root / "tmp")
    _chroot(root, "dpkg -i /tmp/rtla_*.deb && rm /tmp/rtla_*.deb && "
                  "rtla timerlat top --help 2>&1 | grep -q -- --aa-only", log, progress)

    step(f"configuring the root tree (stock kernel {stock})")
    _configure(root, root_uuid, (out / "id_ed25519.pub").read_text(), log, progress)
    host_key = " ".join((root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2])
    boot = out / "boot"
    boot.mkdir()
    for name in (f"vmlinuz-{stock}", f"initrd.img-{stock}"):  # for the direct kernel boot below
        shutil.copy(root / "boot" / name, boot / name)

    step(f"writing the tree into an ext4 partition of a {DISK_MIB} MiB disk (sfdisk, mke2fs -d)")
    raw = out / "disk.raw"
    with open(raw, "wb") as f:
        f.truncate(DISK_MIB << 20)
    subprocess.run(["sfdisk", "-q", str(raw)], check=True, text=True,
                   input=f"label: dos\nstart={PART_START_MIB << 11}, type=83, bootable\n")
    _run_logged(["mke2fs", "-q", "-F", "-t", "ext4", "-L", "rtforge-root", "-U", root_uuid, "-d", root,
                 "-E", f"offset={PART_START_MIB << 20}", raw, f"{DISK_MIB - PART_START_MIB}M"], log, progress, "mke2fs")
    _remove(root)

    step("first boot (QEMU direct kernel boot) to run grub-install and update-grub inside the guest")
    g = Guest(out / "firstboot", raw, out / "id_ed25519", host_key, disk_format="raw",
              kernel=boot / f"vmlinuz-{stock}", initrd=boot / f"initrd.img-{stock}",
              append=f"root=UUID={root_uuid} ro {CMDLINE}").start()
    try:
        step(f"  booted, SSH after {g.wait_ssh():.0f} s; installing GRUB, rebuilding the initramfs (MODULES=dep)")
        r = g.ssh("grub-install /dev/vda && update-initramfs -u -k all && update-grub", timeout=3600)
        with open(log, "a") as f:
            f.write(r.stdout + r.stderr)
        stock_entry = g.grub_entry(stock)
        g.ssh(f"grub-set-default '{stock_entry}'")
        if g.grubenv().get("saved_entry") != stock_entry:
            raise BuildError(f"grub-set-default did not take: {g.grubenv()}")
        g.poweroff()
    finally:
        g.stop()
        with open(log, "a") as f:
            f.write(g.console())
    _remove(boot)
    _remove(out / "firstboot")

    step("converting to qcow2")
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(out / "disk.qcow2")], check=True)
    raw.unlink()

    step("verification boot through SeaBIOS and GRUB (on a throwaway overlay)")
    probe = GuestImage(out, stock, stock_entry, root_uuid, host_key, rt_release, rt_debs, unbootable_release,
                       unbootable_deb, 0.0)
    g = start_guest(probe, out / "verify")
    try:
        cmdline = g.ssh("cat /proc/cmdline").stdout
        running = g.ssh("uname -r").stdout.strip()
        saved = g.grubenv().get("saved_entry")
        if f"BOOT_IMAGE=/boot/vmlinuz-{stock} " not in cmdline or running != stock or saved != stock_entry:
            raise BuildError(f"the verification boot did not come through GRUB's saved default into {stock}: "
                             f"uname -r {running}, cmdline {cmdline}, saved_entry {saved}")
        step(f"  SSH after {g.boot_s:.0f} s, running {running} from GRUB's saved default")
    finally:
        g.stop()
        with open(log, "a") as f:
            f.write(g.console())
    _remove(out / "verify")

    (out / "image.json").write_text(json.dumps({
        "stock_release": stock, "stock_entry": stock_entry, "root_uuid": root_uuid, "host_key": host_key,
        "rt_release": rt_release, "rt_debs": [p.name for p in rt_debs],
        "unbootable_release": unbootable_release, "unbootable_deb": unbootable_deb.name,
        "build_s": round(time.monotonic() - t0, 1),
    }, indent=2) + "\n")


def _chroot(root: Path, script: str, log: Path, progress) -> None:
    _run_logged(["chroot", root, "sh", "-ec", script], log, progress, "chroot",
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})


def _configure(root: Path, root_uuid: str, user_pub: str, log: Path, progress) -> None:
    (root / "etc/fstab").write_text(f"UUID={root_uuid} / ext4 errors=remount-ro 0 1\n")
    (root / "etc/hostname").write_text("rtforge-guest\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 rtforge-guest\n")
    (root / "etc/default/grub").write_text(GRUB_DEFAULTS)
    # Only the root disk's driver and file system in an initramfs: MODULES=most
    # makes update-initramfs take ~13 min under TCG (measured), dep ~1.5 min.
    (root / "etc/initramfs-tools/conf.d/rtforge-test").write_text("MODULES=dep\n")
    (root / "etc/systemd/network/20-wired.network").write_text("[Match]\nName=en*\n\n[Network]\nDHCP=ipv4\n")
    # One host key, recorded next to the image for known_hosts.
    for k in (root / "etc/ssh").glob("ssh_host_*_key*"):
        if "ed25519" not in k.name:
            k.unlink()
    (root / "etc/ssh/sshd_config.d/rtforge-test.conf").write_text(
        "HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUseDNS no\n")
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(user_pub)
    (ssh_dir / "authorized_keys").chmod(0o600)
    _chroot(root, f"""
        systemctl enable systemd-networkd
        systemctl mask {' '.join(MASKED)}
        useradd --create-home --shell /bin/bash {SUDO_USER}
        usermod -p '*' {SUDO_USER}
        install -d -m 700 -o {SUDO_USER} -g {SUDO_USER} /home/{SUDO_USER}/.ssh
        install -m 600 -o {SUDO_USER} -g {SUDO_USER} /root/.ssh/authorized_keys /home/{SUDO_USER}/.ssh/
        echo '{SUDO_USER} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{SUDO_USER}
        chmod 440 /etc/sudoers.d/{SUDO_USER}
        apt-get clean
    """, log, progress)


def _download_rt(dest: Path, log: Path, progress) -> tuple[str, list[Path]]:
    """Debian's linux-image-rt-amd64 and the versioned package it depends on,
    fetched with the host's apt: the guest never needs the network."""
    dest.mkdir(parents=True)
    dep = subprocess.run(["apt-cache", "depends", "--no-recommends", "--no-suggests", "linux-image-rt-amd64"],
                         capture_output=True, text=True)
    names = [ln.split(":", 1)[1].strip() for ln in dep.stdout.splitlines()
             if ln.strip().startswith("Depends: linux-image-")]
    if dep.returncode or len(names) != 1:
        raise BuildError("apt-cache does not know linux-image-rt-amd64 and its kernel package: "
                         "run `apt-get update` on this machine first")
    rt_release = names[0].removeprefix("linux-image-")
    # APT::Sandbox::User=root: the _apt user may not write into the cache
    _run_logged(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", "linux-image-rt-amd64", names[0]],
                log, progress, "apt-get download", cwd=dest)
    meta = sorted(dest.glob("linux-image-rt-amd64_*.deb"))
    image = sorted(dest.glob(f"linux-image-{rt_release}_*.deb"))
    if len(meta) != 1 or len(image) != 1:
        raise BuildError(f"apt-get download did not produce the two RT packages: {sorted(dest.iterdir())}")
    return rt_release, [meta[0], image[0]]


def _make_unbootable_deb(dest: Path, rt_deb: Path, rt_release: str, log: Path, progress) -> tuple[str, Path]:
    """A kernel package that installs fine and cannot boot, the commonest real
    way a new kernel fails: Debian's real RT kernel image (and its config, so
    it looks RT to any check) but *no initramfs*.  Debian builds virtio_blk
    and ext4 as modules, so this kernel cannot mount its root file system and
    panics ("VFS: Unable to mount root fs"); with panic=10 it reboots, and
    since grub-reboot's one-time entry was consumed when GRUB chose it, the
    next boot is the saved default again.  Its postinst/postrm run update-grub,
    as a real kernel package's /etc/kernel hooks do."""
    release = f"{rt_release}-unbootable"
    pkg = dest / "unbootable"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "boot").mkdir()
    tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(rt_deb)], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(pkg), "--wildcards", "./boot/vmlinuz-*", "./boot/config-*"],
                   stdin=tar.stdout, check=True)
    if tar.wait():
        raise BuildError(f"dpkg-deb could not read {rt_deb}")
    os.rename(pkg / f"boot/vmlinuz-{rt_release}", pkg / f"boot/vmlinuz-{release}")
    os.rename(pkg / f"boot/config-{rt_release}", pkg / f"boot/config-{release}")
    (pkg / "DEBIAN/control").write_text(f"""\
Package: linux-image-{release}
Version: 1
Architecture: amd64
Maintainer: rtforge tests <rtforge@localhost>
Section: kernel
Priority: optional
Description: PREEMPT_RT kernel without its initramfs (cannot boot; rtforge test)
 Debian's {rt_release} kernel image without the initramfs that holds its disk
 driver: it panics because it cannot mount its root file system.
""")
    hook = ('#!/bin/sh\nset -e\nif [ "$1" = {when} ] && command -v update-grub >/dev/null '
            '&& [ -e /boot/grub/grub.cfg ]; then update-grub; fi\n')
    for script, when in (("postinst", "configure"), ("postrm", "remove")):
        (pkg / "DEBIAN" / script).write_text(hook.format(when=when))
        (pkg / "DEBIAN" / script).chmod(0o755)
    deb = dest / f"linux-image-{release}_1_amd64.deb"
    _run_logged(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", pkg, deb], log, progress, "dpkg-deb")
    _remove(pkg)
    return release, deb


if __name__ == "__main__":
    img = ensure_image()
    print(json.dumps({k: str(v) for k, v in vars(img).items()}, indent=2))
