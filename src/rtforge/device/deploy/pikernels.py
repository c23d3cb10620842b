"""The rtforge kernels on a Raspberry Pi: list, remove, roll back.

A deployed kernel lives in <boot>/rtforge-<release>/ (with the bundle's
manifest as rtforge.json) and /lib/modules/<release>/; Raspberry Pi's own RT
kernel (`deploy --official`) is the package linux-image-rpi-v8-rt with
<boot>/kernel8_rt.img.  Every commit left a backup config.txt.rtforge-<UTC
time>.  Nothing else on the board is touched: a directory without
rtforge.json is not rtforge's to remove.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from ...errors import UserError
from ..firmware.bootcfg import BootChoice, resolve, resolve_text
from ..firmware.bootfs import RemoteBootFiles
from ..firmware.pimodels import PiModel, model_for_dt
from ..transport.device import Device
from ..transport.facts import DeviceFacts
from .manifest import installed as installed_manifest
from .official import IMAGE as OFFICIAL_IMAGE
from .official import PACKAGE as OFFICIAL_PACKAGE
from .official import official_packages, official_release


@dataclass
class InstalledKernel:
    release: str
    board: str
    prefix: str          # "rtforge-<release>/" ("" for the official package's kernel8_rt.img)
    default: bool        # config.txt boots it
    running: bool


def _boot_dir(board: Device) -> tuple[DeviceFacts, str, PiModel]:
    """The board's facts, its boot partition and its model."""
    facts = board.facts()
    if facts.boot_dir is None:
        raise UserError(f"{board.name} has no config.txt in /boot/firmware or /boot: not a Raspberry Pi boot partition")
    return facts, facts.boot_dir, model_for_dt(facts.model)


def installed(board: Device) -> tuple[list[InstalledKernel], BootChoice]:
    facts, boot_dir, model = _boot_dir(board)
    now = resolve(RemoteBootFiles(board, boot_dir), model)
    # each rtforge-*/ with an rtforge.json: "@@@<dir>" then the manifest
    out = board.t.run(["sh", "-c", 'cd "$1" && for d in rtforge-*/; do [ -f "$d/rtforge.json" ] || continue; '
                       'printf "@@@%s\\n" "$d"; cat "$d/rtforge.json"; done; true', "sh", board.path(boot_dir)],
                      check=True, step="listing kernels").stdout
    kernels = []
    for chunk in out.split("@@@")[1:]:
        prefix, _, text = chunk.partition("\n")
        named = installed_manifest(text)
        if named is None:
            continue  # a damaged manifest: not shown, never removed
        release, board_name = named
        kernels.append(InstalledKernel(release, board_name, prefix, default=(now.os_prefix == prefix),
                                       running=facts.release == release))
    official = official_release(board)
    if official and board.t.exists(board.path(f"{boot_dir}/{OFFICIAL_IMAGE}")):
        kernels.append(InstalledKernel(official, f"{OFFICIAL_PACKAGE}, Raspberry Pi's", "",
                                       default=now.kernel == OFFICIAL_IMAGE, running=facts.release == official))
    return kernels, now


def remove(board: Device, release: str) -> None:
    kernels, _ = installed(board)
    match = [k for k in kernels if k.release == release]
    if not match:
        known = ", ".join(k.release for k in kernels) or "none"
        raise UserError(f"no rtforge kernel {release} on {board.name} (installed: {known})")
    k = match[0]
    if k.running:
        raise UserError(f"{release} is running on {board.name}: reboot into another kernel first")
    if k.default:
        raise UserError(f"{release} is what {board.name} boots by default: `rtforge rollback {board.name}` first")
    if not k.prefix:  # the official package: apt removes what it installed
        board.t.run(board.apt_get("purge", *official_packages(board)), sudo=True, check=True, timeout=900,
                    step=f"removing {release}")
        return
    _, boot_dir, _ = _boot_dir(board)
    board.t.run(["rm", "-rf", "--", board.path(f"{boot_dir}/{k.prefix}"), board.path(f"/lib/modules/{release}")],
                sudo=True, check=True, step=f"removing {release}")
    # its headers, when `deploy --headers` installed them: they belong to no other kernel
    headers = f"linux-headers-{release}"
    admindir = board.path("/var/lib/dpkg")
    q = board.t.run(["dpkg-query", f"--admindir={admindir}", "-W", "-f", "${Status}", headers])
    if q.returncode == 0 and q.stdout.strip() == "install ok installed":
        board.t.run(board.apt_get("purge", headers), sudo=True, check=True, timeout=900,
                    step=f"removing {headers}")


def rollback(board: Device) -> tuple[str, BootChoice]:
    """Restore the newest config.txt backup that differs from config.txt.
    The config.txt being replaced is itself kept as a backup first."""
    _, boot_dir, model = _boot_dir(board)
    boot = board.path(boot_dir)
    names = board.t.run(
        ["sh", "-c", 'cd "$1" && ls -1 config.txt.rtforge-* 2>/dev/null; true', "sh", boot]
    ).stdout.split()
    current = board.t.read_bytes(f"{boot}/config.txt", sudo=True, step="rollback")
    for name in sorted(names, reverse=True):
        old = board.t.read_bytes(f"{boot}/{name}", sudo=True, step="rollback")
        if old != current:
            break
    else:
        raise UserError(
            f"{board.name} has no earlier boot configuration to return to (no config.txt.rtforge-* "
            "backup that differs from config.txt)"
        )
    files = RemoteBootFiles(board, boot_dir)
    choice = resolve_text(old.decode("utf-8", "replace"), files, model)
    if choice.kernel is None or not files.exists(choice.kernel):
        raise UserError(f"{name} would boot {choice.kernel}, which is not on the boot partition; nothing was changed")
    stamp = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    board.t.write_bytes(f"{boot}/config.txt.rtforge-{stamp}-rolled-back", current, sudo=True, step="rollback")
    board.t.write_bytes(f"{boot}/config.txt", old, sudo=True, step="rollback")
    return name, resolve(RemoteBootFiles(board, boot_dir), model)
