"""A local apt repository on loopback serving a stand-in for Raspberry Pi's
RT kernel package, and a simulated Pi tree that the real apt and dpkg install
into.  (Raspberry Pi's repository is not reachable from here.)

The package is built with dpkg-deb in the layout the real one installs:
/boot/firmware/kernel8_rt.img, /boot/config-<release>, /lib/modules/<release>/.
The repository is a flat one (`deb [trusted=yes] http://127.0.0.1:PORT/ ./`:
Packages from dpkg-scanpackages, served by python's http.server).

Why apt cannot touch this machine: the tree is a system of its own for apt
and dpkg.  Its /etc/apt/apt.conf sets Dir to the tree (sources, lists,
cache, the dpkg status file all live there) and passes dpkg --root=<tree>,
so dpkg unpacks below the tree and keeps its database there; rtforge points
apt at that file with APT_CONFIG for a target that lives under a root
(Device.apt_get), and refuses such a target without one.  The package has no
maintainer scripts, so nothing runs chrooted.  apt's locks are the tree's,
so this machine's own apt is never blocked.  The tests check afterwards that
this machine's /boot, /lib/modules and dpkg database did not change.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .procs import free_port
from .simpi import arm64_image

PACKAGE = "linux-image-rpi-v8-rt"


def build_kernel_deb(work: Path, release: str, *, rt: bool = True,
                     tag: str = "official rt kernel") -> tuple[Path, bytes]:
    """The package as a .deb in `work`; returns (deb, kernel image bytes)."""
    root = work / "pkg"
    image = arm64_image(tag)
    files = {
        "boot/firmware/kernel8_rt.img": image,
        f"boot/config-{release}": b"CONFIG_PREEMPT=y\n" + (b"CONFIG_PREEMPT_RT=y\n" if rt else b""),
        f"lib/modules/{release}/modules.dep": b"",
        f"lib/modules/{release}/kernel/drivers/rt-test.ko": b"\x7fELF module",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN/control").write_text(
        f"Package: {PACKAGE}\nVersion: 1:{release.split('+')[0]}-1+rpt1\nArchitecture: arm64\n"
        "Maintainer: rtforge tests <tests@rtforge.invalid>\nSection: kernel\nPriority: optional\n"
        "Description: stand-in for Raspberry Pi's PREEMPT_RT kernel (kernel8_rt.img)\n")
    deb = work / f"{PACKAGE}_{release}_arm64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], check=True, capture_output=True)
    return deb, image


class AptRepo:
    """A flat repository of `debs`, served on a loopback port while open."""

    def __init__(self, folder: Path, debs: list[Path]):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for deb in debs:
            (folder / deb.name).write_bytes(deb.read_bytes())
        packages = subprocess.run(["dpkg-scanpackages", "-m", "."], cwd=folder, check=True, capture_output=True,
                                  text=True).stdout
        (folder / "Packages").write_text(packages)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc = subprocess.Popen([sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d", str(folder),
                                      str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(self.url + "Packages", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def make_apt_tree(root: Path, repo_url: str) -> None:
    """Give the simulated Pi tree its own apt and dpkg (see the module doc)."""
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/apt/lists/partial",
              "var/cache/apt/archives/partial", "var/log/apt", "etc/apt/apt.conf.d", "etc/apt/preferences.d",
              "etc/apt/sources.list.d", "etc/apt/trusted.gpg.d"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for f in ("var/lib/dpkg/status", "var/lib/dpkg/available"):
        (root / f).touch()
    # A Pi's dpkg is arm64; this machine's dpkg binary is amd64, so the tree's
    # database names arm64 as an architecture it accepts.
    subprocess.run(["dpkg", f"--root={root}", "--add-architecture", "arm64"], check=True)
    (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] {repo_url} ./\n")
    (root / "etc/apt/apt.conf").write_text(f'''\
Dir "{root}/";
APT::Architecture "arm64";
APT::Architectures {{ "arm64"; }};
APT::Sandbox::User "root";
Acquire::Languages "none";
DPkg::Options {{ "--root={root}"; }};
''')


def host_state(release: str) -> dict:
    """What on this machine the package would change if apt went wrong."""
    q = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", PACKAGE], capture_output=True, text=True)
    return {"kernel8_rt.img": [str(p) for p in (Path("/boot/firmware/kernel8_rt.img"), Path("/boot/kernel8_rt.img"))
                               if p.exists()],
            "modules": Path(f"/lib/modules/{release}").exists(),
            "config": Path(f"/boot/config-{release}").exists(),
            "dpkg": q.stdout if q.returncode == 0 else "not installed"}
