"""From a finished build to dist/<kernelrelease>-<board>/:

    bundle/                     what `rtforge deploy` installs (device/deploy/bundle.py)
      manifest.json  boot/<image>  boot/*.dtb  boot/overlays/  lib/modules/<release>/
      headers/linux-headers-<release>_*.deb   for DKMS, when proven usable on the board (headers.py)
      match/config-<running release>          --match: the running kernel's configuration
    <release>-<board>.tar.gz    the same bundle as one file
    *.deb                       Kbuild's bindeb-pkg (for apt/dpkg and GRUB boards)
    match-report.txt            --match: every option that differs from the running kernel, and why

The directory is assembled under a temporary name and renamed into place,
so a failed packaging never leaves a half bundle that deploy would trust.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..device.deploy.manifest import rt_marker, write_manifest
from ..errors import UserError
from .boards import Board
from .fetch import sha256_file
from .headers import cannot_build, check_headers, headers_rule
from .kbuild import kbuild_env, make_argv, run_make


def kernelrelease(tree: Path, build: Path, board: Board, localversion: str) -> str:
    out = subprocess.run(make_argv(tree, build, board, ["kernelrelease"], extra=["-s", f"LOCALVERSION={localversion}"]),
                         capture_output=True, text=True, env=kbuild_env())
    if out.returncode or not out.stdout.strip():
        raise UserError(f"make kernelrelease failed: {out.stderr.strip()[-200:]}")
    return out.stdout.strip().splitlines()[-1]


def _copy_globs(base: Path, globs: Sequence[str], dest: Path) -> list[str]:
    copied = []
    for pattern in globs:
        for src in sorted(base.glob(pattern)):
            if src.is_file():
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / src.name)
                copied.append(src.name)
    return copied


def package(tree: Path, build: Path, board: Board, flavour: str, config: dict[str, str], localversion: str,
            dist_root: Path, manifest_extra: dict[str, Any], *, debs: bool, log: Path, jobs: int,
            running_config: str | None = None, report: str | None = None) -> Path:
    release = kernelrelease(tree, build, board, localversion)
    dist = dist_root / f"{release}-{board.name}"
    work = dist_root / f".{dist.name}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    bundle = work / "bundle"
    boot = bundle / "boot"
    boot.mkdir(parents=True)
    image = build / board.image_path
    if not image.is_file():
        raise UserError(f"the build has no {board.image_path}: see {log}")
    shutil.copy2(image, boot / board.image_name)
    dts = build / board.dts_dir
    dtbs = _copy_globs(dts, board.dtbs.get(flavour, ()), boot)
    overlays = _copy_globs(dts, board.overlays.get(flavour, ()), boot / "overlays")
    if overlays:
        readme = tree / "arch/arm/boot/dts/overlays/README"
        # With overlays/README under os_prefix the firmware loads overlays from there.
        (boot / "overlays" / "README").write_bytes(readme.read_bytes() if readme.exists() else b"rtforge overlays\n")
    lv = [f"LOCALVERSION={localversion}"]
    if config.get("MODULES") == "y":
        run_make(make_argv(tree, build, board, ["modules_install"], extra=lv + [f"INSTALL_MOD_PATH={bundle}",
                                                                             "INSTALL_MOD_STRIP=1"]),
                 log, what="make modules_install")
        for link in ("build", "source"):
            (bundle / "lib/modules" / release / link).unlink(missing_ok=True)  # point into this host only
    # The configuration, as Debian keeps it in /boot: what exactly was built.
    shutil.copy2(build / ".config", bundle / f"config-{release}")
    if running_config is not None:
        running = manifest_extra["match"]["running"]["release"]
        (bundle / "match").mkdir()
        (bundle / "match" / f"config-{running}").write_text(running_config)
        (work / "match-report.txt").write_text(report or "")
    # A kernel whose RT option --allow-dropped let go keeps the old patches' word, and fails every check of it.
    marker = rt_marker(config) or "RT"
    debs_made: list[Path] = []
    no_headers = cannot_build(tree, board.cross_compile, config) if debs else None
    if debs:
        debs_made = _bindeb_pkg(tree, build, board, lv, release, log, jobs, headers=no_headers is None)
    headers = ({"deb": None, "why": f"the headers package was not built: {no_headers}"} if no_headers else
               _headers(tree, build, board, config, release, debs, debs_made, bundle))
    manifest_extra = {**manifest_extra, "headers": headers}
    write_manifest(
        bundle,
        board=board.name,
        arch=board.arch,
        machines=list(board.uname_m),
        models=list(board.models),
        pis=list(board.pis),
        kernelrelease=release,
        image=board.image_name,
        uname_v_marker=marker,
        flavour=flavour,
        dtbs=dtbs,
        overlays=len(overlays),
        config_sha256=sha256_file(build / ".config"),
        emulated=board.emulated_manifest(flavour),
        user_cpus=list(board.user_cpus),
        rtforge_version=__version__,
        **manifest_extra,
    )
    with tarfile.open(work / f"{release}-{board.name}.tar.gz", "w:gz") as tar:
        for p in sorted(bundle.iterdir()):
            tar.add(p, arcname=p.name)
    for deb in debs_made:
        shutil.move(str(deb), work / deb.name)
    shutil.rmtree(dist, ignore_errors=True)
    work.rename(dist)
    return dist


def _bindeb_pkg(tree: Path, build: Path, board: Board, lv: list[str], release: str, log: Path,
                jobs: int, *, headers: bool) -> list[Path]:
    for old in build.parent.glob("*.deb"):
        old.unlink()
    # Kbuild's own profile to leave the headers package out (scripts/package/mkdebian)
    source = os.environ.get("KDEB_SOURCENAME") or "linux-upstream"
    env = {} if headers else {"DEB_BUILD_PROFILES": f"pkg.{source}.nokernelheaders"}
    # -d: the build dependencies were checked by building; a cross build
    # would otherwise ask for the target architecture's libssl-dev.
    # KDEB_PKGVERSION ending in -1: the package revision, which bindeb-pkg
    # builds with, is then the build number of the bundle's image.
    run_make(make_argv(tree, build, board, ["bindeb-pkg"], jobs=jobs,
                       extra=lv + ["DPKG_FLAGS=-d", f"KDEB_PKGVERSION={release}-1"]),
             log, what="make bindeb-pkg", env=env)
    return sorted(build.parent.glob("*.deb"))  # Kbuild writes them next to the build directory


def _headers(tree: Path, build: Path, board: Board, config: dict[str, str], release: str, debs: bool,
             made: list[Path], bundle: Path) -> dict[str, Any]:
    """The manifest's `headers`: the headers package in the bundle, or why there is none."""
    if config.get("MODULES") != "y":
        return {"deb": None, "why": "the kernel has no loadable modules (CONFIG_MODULES is not set)"}
    if not debs:
        return {"deb": None, "why": "built with --no-debs: Kbuild's bindeb-pkg makes the headers package"}
    deb = next((d for d in made if d.name.startswith(f"linux-headers-{release}_")), None)
    if deb is None:
        return {"deb": None, "why": f"bindeb-pkg made no linux-headers-{release} package"}
    check = check_headers(deb, build, release, board.arch)
    record = {"package": f"linux-headers-{release}", "rule": headers_rule(tree), "programs": check.programs,
              "module_symvers_sha256": check.symvers_sha256, "symbols": check.symvers_symbols}
    if not check.ok:
        return {**record, "deb": None, "why": check.sentence}
    (bundle / "headers").mkdir()
    shutil.copy2(deb, bundle / "headers" / deb.name)
    return {**record, "deb": f"headers/{deb.name}", "why": check.sentence}
