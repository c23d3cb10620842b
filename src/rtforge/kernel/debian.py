"""Debian's kernel sources (linux-source-X.Y) from any Debian suite, through
apt, without touching the system's apt.

Debian publishes linux-source-X.Y in several suites: bookworm has 6.1 (and
6.12 through bookworm-security), bookworm-backports and trixie 6.12, and
trixie-backports and sid the newest series (7.2, 7.3 in 2026).  A system
lists only some of them.  rtforge runs apt with a private configuration:
its own sources list (the system's Debian sources plus the other suites on
the same mirror), its own package lists and its own download folder, all in
rtforge's cache; the system's sources, lists and installed packages are never
touched, so no root is needed.  apt itself verifies what it downloads: the
suites' Release files against the system's Debian archive keyring and the
.deb against the signed index.  The host's apt.conf.d still applies (proxies,
a mirror snapshot's Check-Valid-Until), as for the system's own apt.

An installed linux-source-X.Y (/usr/src/linux-source-X.Y.tar.xz) is used as
it is, with no network.

    resolve("6.12") -> DebianSource(package, version, suite, tarball)
    resolve("latest") -> the newest linux-source-X.Y any suite offers
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import UserError
from . import fetch
from .fetch import Progress, report

# Suites searched besides the system's own (same mirror, same archive key).
EXTRA_SUITES = ("bookworm-backports", "trixie", "trixie-backports", "sid")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
LISTS_MAX_AGE_S = 24 * 3600
ENV_MIRROR = "RTFORGE_DEBIAN_MIRROR"      # another Debian mirror (or a test's loopback one)
ENV_KEYRING = "RTFORGE_DEBIAN_KEYRING"


@dataclass(frozen=True)
class DebianSource:
    package: str          # linux-source-7.3
    version: str          # 7.3.4-1~bpo13+1
    origin: str           # trixie-backports, or "installed"
    tarball: Path         # .../linux-source-7.3.tar.xz

    @property
    def series(self) -> str:
        return self.package.removeprefix("linux-source-")


def _series_key(series: str) -> tuple[int, ...]:
    return tuple(int(x) for x in series.split("."))


def installed_series() -> list[str]:
    """X.Y of every installed /usr/src/linux-source-X.Y.tar.xz, oldest first."""
    found = [m.group(1) for p in Path("/usr/src").glob("linux-source-*.tar.xz")
             if (m := re.fullmatch(r"linux-source-(\d+\.\d+)\.tar\.xz", p.name))]
    return sorted(found, key=_series_key)


def _dpkg_version(package: str) -> str | None:
    if shutil.which("dpkg-query") is None:
        return None
    p = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}\t${Version}", package],
                       capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.startswith("ii"):
        return None
    return p.stdout.split("\t", 1)[1].strip()


def _installed(series: str) -> DebianSource | None:
    package = f"linux-source-{series}"
    tarball = Path(f"/usr/src/{package}.tar.xz")
    version = _dpkg_version(package)
    return DebianSource(package, version, "installed", tarball) if version and tarball.is_file() else None


# ---------------------------------------------------------------- the system's sources

def _system_sources() -> list[tuple[str, list[str]]]:
    """(URI, suites) of the system's Debian sources (deb822 and one-line)."""
    out: list[tuple[str, list[str]]] = []
    etc = Path("/etc/apt")
    for f in sorted((etc / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", f.read_text(errors="replace")):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") != "no":
                for uri in fields.get("URIs", "").split():
                    out.append((uri, fields.get("Suites", "").split()))
    lists = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]
    for f in lists:
        if f.is_file():
            for line in f.read_text(errors="replace").splitlines():
                m = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    out.append((m.group(1), [m.group(2)]))
    # Debian's own archives only (not a vendor's repository that shares the system).
    return [(u, s) for u, s in out if re.search(r"/debian(-security)?/?$", u)]


def _sources_list() -> str:
    keyring = os.environ.get(ENV_KEYRING) or KEYRING
    mirror = os.environ.get(ENV_MIRROR)
    system = [] if mirror else _system_sources()
    if not mirror:
        main = [u for u, _ in system if not u.rstrip("/").endswith("-security")]
        mirror = main[0] if main else "http://deb.debian.org/debian"
    entries = {(u, s) for u, suites in system for s in suites}
    entries |= {(mirror, s) for s in EXTRA_SUITES}
    return "".join(f"deb [signed-by={keyring}] {u} {s} main\n" for u, s in sorted(entries))


# ---------------------------------------------------------------- private apt

class PrivateApt:
    """apt-get/apt-cache with every Dir:: of their own under `root`; `arch`
    makes it see another architecture's packages (a board's), not this
    machine's."""

    def __init__(self, root: Path, arch: str | None = None):
        self.root = root
        self.arch = arch
        self.lists = root / "lists"
        self.archives = paths.download_dir() / "debian"

    def _opts(self) -> list[str]:
        r = self.root
        return [
            "-o",
            f"Dir::Etc::SourceList={r / 'sources.list'}",
            "-o",
            f"Dir::Etc::SourceParts={r / 'empty'}",
            "-o",
            f"Dir::Etc::Preferences={r / 'empty' / 'none'}",
            "-o",
            f"Dir::Etc::PreferencesParts={r / 'empty'}",
            "-o",
            f"Dir::State={r / 'state'}",
            "-o",
            f"Dir::State::Lists={self.lists}",
            "-o",
            f"Dir::State::status={r / 'state' / 'status'}",
            "-o",
            f"Dir::Cache={r / 'cache'}",
            "-o",
            f"Dir::Cache::Archives={self.archives}",
            "-o",
            "Dir::Cache::pkgcache=",
            "-o",
            "Dir::Cache::srcpkgcache=",
            "-o",
            "Acquire::Languages=none",
            # as root apt would download as _apt, who cannot write into rtforge's cache
            "-o",
            "APT::Sandbox::User=root",
            *(["-o", f"APT::Architecture={self.arch}", "-o", f"APT::Architectures::={self.arch}"] if self.arch else []),
        ]

    def _prepare(self) -> None:
        for d in (
            self.lists / "partial",
            self.root / "state",
            self.root / "cache",
            self.root / "empty",
            self.archives / "partial",
        ):
            d.mkdir(parents=True, exist_ok=True)
        (self.root / "state" / "status").touch()
        text = _sources_list()
        f = self.root / "sources.list"
        if not f.exists() or f.read_text() != text:
            f.write_text(text)
            shutil.rmtree(self.lists, ignore_errors=True)  # other suites: lists must be fetched again
            (self.lists / "partial").mkdir(parents=True)

    def _run(self, tool: str, args: list[str], what: str, cwd: Path | None = None) -> str:
        if shutil.which(tool) is None:
            raise UserError(f"debian: sources need {tool} (Debian's apt); use tar: or git: on a system without it")
        p = subprocess.run(
            [tool, *self._opts(), *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "LC_ALL": "C"},
        )
        if p.returncode != 0:
            lines = [x for x in (p.stderr.strip() or p.stdout.strip()).splitlines() if x.startswith(("E:", "Err"))]
            raise UserError(f"{what} failed: {(lines or [f'exit status {p.returncode}'])[-1]}")
        return p.stdout

    def update(self, progress: Progress, force: bool = False) -> None:
        self._prepare()
        stamp = self.root / "updated"
        if not force and stamp.exists() and time.time() - stamp.stat().st_mtime < LISTS_MAX_AGE_S:
            return
        report(progress, "apt-get update (rtforge's own package lists of every Debian suite)")
        try:
            self._run("apt-get", ["update", "-q"], "apt-get update of rtforge's Debian package lists")
        except UserError:
            # a suite the mirror does not carry makes apt fail; the others are still usable
            if not any(self.lists.glob("*_Packages*")):
                raise
        stamp.touch()

    def versions(self, package: str) -> list[tuple[str, str]]:
        """(version, suite) of every version the suites offer, newest first."""
        out = self._run("apt-cache", ["madison", package], "apt-cache madison")
        found: list[tuple[str, str]] = []
        for line in out.splitlines():
            cols = [c.strip() for c in line.split("|")]
            if len(cols) >= 3 and cols[0] == package:
                found.append((cols[1], cols[2].split()[1].split("/")[0] if len(cols[2].split()) > 1 else "?"))
        def newest_first(a: tuple[str, str], b: tuple[str, str]) -> int:
            return _compare(b[0], a[0])
        return sorted(found, key=functools.cmp_to_key(newest_first))

    def series_available(self) -> list[str]:
        out = self._run("apt-cache", ["pkgnames", "linux-source-"], "apt-cache pkgnames")
        return sorted(
            {m.group(1) for line in out.split() if (m := re.fullmatch(r"linux-source-(\d+\.\d+)", line))},
            key=_series_key,
        )

    def download(self, package: str, version: str, progress: Progress) -> Path:
        deb = self.archives / f"{package}_{version.replace(':', '%3a')}_{self.arch or 'all'}.deb"
        if deb.is_file():
            return deb
        report(progress, f"downloading {package} {version} with apt")
        # apt-get download writes into the current directory, verified against the signed index
        self._run(
            "apt-get", ["download", "-q", f"{package}={version}"], f"apt-get download {package}", cwd=self.archives
        )
        if not deb.is_file():
            found = sorted(self.archives.glob(f"{package}_*.deb"), key=lambda p: p.stat().st_mtime)
            if not found:
                raise UserError(f"apt-get download {package}={version} left no .deb in {self.archives}")
            deb = found[-1]
        return deb


def _compare(a: str, b: str) -> int:
    """Debian version order, by dpkg itself."""
    if a == b:
        return 0
    lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0
    return -1 if lt else 1


def _tarball_from_deb(deb: Path, package: str, version: str, progress: Progress) -> Path:
    """usr/src/linux-source-X.Y.tar.xz out of the .deb (dpkg-deb + tar)."""
    dest = deb.with_name(f"{package}_{fetch.safe_name(version)}.tar.xz")
    if dest.is_file():
        return dest
    report(progress, f"unpacking {deb.name}")
    stage = deb.with_name(f".{deb.name}.{os.getpid()}.d")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        member = f"./usr/src/{package}.tar.xz"
        script = 'dpkg-deb --fsys-tarfile "$1" | tar -x -C "$2" "$3"'
        p = subprocess.run(["sh", "-c", script, "sh", str(deb), str(stage), member], capture_output=True, text=True)
        got = stage / member
        if p.returncode != 0 or not got.is_file():
            raise UserError(
                f"{deb.name} holds no {member[2:]}: {p.stderr.strip()[-200:] or 'not a linux-source package'}"
            )
        os.replace(got, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return dest


class VersionNotOffered(UserError):
    """The exact package version asked for is neither installed nor offered by any suite."""

    def __init__(self, message: str, offered: list[str]):
        super().__init__(message)
        self.offered = offered


def resolve(series: str | None, progress: Progress = None, version: str | None = None) -> DebianSource:
    """series: "X.Y", "latest" (the newest any suite has) or None (the newest
    installed, else latest); version: exactly that package version of X.Y."""
    if series is None:
        have = installed_series()
        if have:
            return _installed(have[-1]) or resolve(have[-1], progress)
        series = "latest"
    if series != "latest" and (src := _installed(series)) is not None and version in (None, src.version):
        return src
    apt = PrivateApt(fetch.kernel_cache() / "apt")
    apt.update(progress)
    if series == "latest":
        available = apt.series_available()
        if not available:
            apt.update(progress, force=True)
            available = apt.series_available()
        if not available:
            raise UserError(
                "no Debian suite offers a linux-source-X.Y package: check the network and "
                "the system's apt sources (a Debian mirror)"
            )
        series = available[-1]
    package = f"linux-source-{series}"
    versions = apt.versions(package)
    if not versions:
        apt.update(progress, force=True)
        versions = apt.versions(package)
    if not versions:
        offered_series = ", ".join(apt.series_available()) or "none"
        raise UserError(
            f"no Debian suite offers {package} (offered: {offered_series}): use debian:X.Y with one of those, or "
            "debian:latest"
        )
    if version is not None:
        offered = [v for v, _ in versions]
        if version not in offered:
            apt.update(progress, force=True)        # a day-old list may not know a new upload yet
            versions = apt.versions(package)
            offered = [v for v, _ in versions]
        if version not in offered:
            installed = _installed(series)
            listed = offered + ([f"{installed.version} (installed)"] if installed else [])
            raise VersionNotOffered(f"no Debian suite offers {package} {version} any more (offered: "
                                    f"{', '.join(listed) or 'none'})", offered)
        versions = [row for row in versions if row[0] == version]
    version, suite = versions[0]
    deb = apt.download(package, version, progress)
    return DebianSource(package, version, suite, _tarball_from_deb(deb, package, version, progress))
