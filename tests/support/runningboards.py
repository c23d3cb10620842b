"""Copies of what a board shows about its running kernel -- the files
`rtforge kernel build --match` reads -- for Raspberry Pi OS (32- and 64-bit,
Pi 4 and Pi 5, bookworm's linux-image-*+rpt-* packages and the older
raspberrypi-kernel), Debian on a Pi, and boards with no package or no
configuration.

What is real and what is made up, so nobody mistakes a fixture for a source:
  - the release, package and version shapes are Raspberry Pi OS's and
    Debian's as users print them: "6.12.47+rpt-rpi-v7l", "linux-image-6.6.62+
    rpt-rpi-v8 (1:6.6.62-1+rpt1)", "#1 SMP Raspbian 1:6.12.47-1+rpt1~bookworm
    (2025-09-16)", the legacy raspberrypi-kernel 1:1.YYYYMMDD-N whose
    versions raspberrypi/linux tags as raspberrypi-kernel_1.YYYYMMDD-N;
  - the changelog texts are written here: what a real +rpt changelog says
    about its source was not available to check, so the reader is tested on
    the shapes it looks for (a 40-digit commit, a tag, a branch, a short hash)
    and on an entry that names none;
  - the dpkg database is a real one (status + info/*.list) read by the real
    dpkg-query --admindir, as on a board.
"""

from __future__ import annotations

import gzip
import textwrap
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Package:
    name: str
    version: str
    arch: str
    files: list[str]
    source: str = "linux"
    changelog: str | None = None        # the whole changelog.Debian text


@dataclass
class BoardTree:
    release: str
    uname_v: str
    arch: str                            # /proc/sys/kernel/arch (uname -m)
    model: str = ""
    os_name: str = ""
    config: str | None = None            # the running configuration's text
    config_at: str = "proc"              # proc: /proc/config.gz; boot: /boot/config-<release>
    packages: list[Package] = field(default_factory=list)

    def write(self, root: Path) -> Path:
        def put(rel: str, data: bytes | str) -> None:
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data.encode() if isinstance(data, str) else data)

        put("proc/sys/kernel/osrelease", self.release + "\n")
        put("proc/sys/kernel/version", self.uname_v + "\n")
        put("proc/sys/kernel/arch", self.arch + "\n")
        if self.model:
            put("proc/device-tree/model", self.model + "\0")
        if self.os_name:
            put("etc/os-release", f'PRETTY_NAME="{self.os_name}"\nID=debian\n')
        if self.config is not None:
            if self.config_at == "proc":
                put("proc/config.gz", gzip.compress(self.config.encode()))
            else:
                put(f"boot/config-{self.release}", self.config)
        if self.packages:
            status = []
            for pkg in self.packages:
                status.append(textwrap.dedent(f"""\
                    Package: {pkg.name}
                    Status: install ok installed
                    Priority: optional
                    Section: kernel
                    Installed-Size: 1
                    Maintainer: fixture <fixture@example.org>
                    Architecture: {pkg.arch}
                    Source: {pkg.source}
                    Version: {pkg.version}
                    Description: a kernel package of a test board
                    """))
                put(f"var/lib/dpkg/info/{pkg.name}.list", "".join(f"{f}\n" for f in ["/.", *pkg.files]))
                if pkg.changelog is not None:
                    put(f"usr/share/doc/{pkg.name}/changelog.Debian.gz", gzip.compress(pkg.changelog.encode()))
            put("var/lib/dpkg/status", "\n".join(status))
        return root


def changelog(source: str, version: str, lines: list[str], older: list[str] = ()) -> str:
    """A Debian changelog: an entry for version with lines, then an older entry."""
    body = "".join(f"  * {line}\n" for line in lines)
    old = "".join(f"  * {line}\n" for line in older) or "  * Older release.\n"
    return (f"{source} ({version}) bookworm; urgency=medium\n\n{body}\n"
            " -- Fixture <fixture@example.org>  Mon, 28 Apr 2025 12:00:00 +0100\n\n"
            f"{source} (0.1) bookworm; urgency=medium\n\n{old}\n"
            " -- Fixture <fixture@example.org>  Mon, 01 Jan 2024 12:00:00 +0100\n")


def rpios(release: str, arch: str, model: str, deb_arch: str, *, changelog_lines: list[str] | None = None,
          config: str | None = "CONFIG_LOCALVERSION=\"\"\n", config_at: str = "proc") -> BoardTree:
    """Raspberry Pi OS bookworm with its linux-image-<release> package."""
    base = release.split("+")[0]
    version = f"1:{base}-1+rpt1"
    pkg = Package(f"linux-image-{release}", version, deb_arch,
                  [f"/boot/vmlinuz-{release}", f"/lib/modules/{release}", f"/lib/modules/{release}/modules.builtin"],
                  changelog=changelog("linux", version, changelog_lines or [f"New upstream release {base}."]))
    smp = "#1 SMP Raspbian" if deb_arch == "armhf" else "#1 SMP PREEMPT Debian"
    return BoardTree(release, f"{smp} {version}~bookworm (2025-04-28)", arch, model,
                     "Debian GNU/Linux 12 (bookworm)", config, config_at, [pkg])


def legacy_rpios(release: str, arch: str, model: str, version: str) -> BoardTree:
    """Raspberry Pi OS before bookworm's kernel packages: raspberrypi-kernel."""
    pkg = Package("raspberrypi-kernel", version, "arm64" if arch == "aarch64" else "armhf",
                  ["/boot/kernel8.img", f"/lib/modules/{release}", f"/lib/modules/{release}/modules.builtin"],
                  source="raspberrypi-firmware", changelog=changelog("raspberrypi-firmware", version,
                                                                     ["firmware as of the day"]))
    return BoardTree(release, "#1642 SMP PREEMPT Mon Apr  3 17:24:16 BST 2023", arch, model,
                     "Debian GNU/Linux 11 (bullseye)", "CONFIG_LOCALVERSION=\"-v8\"\n", "proc", [pkg])


def debian(release: str, version: str, model: str = "Raspberry Pi 4 Model B Rev 1.4", *,
           config: str | None = "CONFIG_LOCALVERSION=\"\"\n") -> BoardTree:
    """Debian's own arm64 kernel on a Pi (Debian's Raspberry Pi images run linux-image-arm64)."""
    pkg = Package(f"linux-image-{release}", version, "arm64",
                  [f"/boot/vmlinuz-{release}", f"/lib/modules/{release}", f"/lib/modules/{release}/modules.builtin"],
                  source=f"linux-signed-arm64 ({version.replace('-', '+', 1)})",
                  changelog=changelog("linux-signed-arm64", version.replace("-", "+", 1), ["Sign kernel."]))
    return BoardTree(release, f"#1 SMP Debian {version} (2025-05-01)", "aarch64", model,
                     "Debian GNU/Linux 12 (bookworm)", config, "boot", [pkg])
