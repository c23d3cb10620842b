"""rtforge target info / deploy / kernels / rollback: a board, over SSH."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..device import open_transport
from ..device.deploy import pikernels
from ..device.deploy.bundle import open_bundle
from ..device.deploy.deb import deploy_grub, read_deb
from ..device.deploy.official import PACKAGE as OFFICIAL_PACKAGE
from ..device.deploy.official import deploy_official
from ..device.deploy.pibundle import deploy_pi, headers_deb
from ..device.transport.device import Device
from ..errors import UserError
from ..units import parse_timeout_s
from .common import HOST_REQUIRED
from .render import make_console

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


target_app = typer.Typer(help="Look at a board before touching it.", no_args_is_help=True)
app.add_typer(target_app, name="target")

SSH_CONFIG = typer.Option(None, "--ssh-config", help="ssh config file to use (ssh -F), e.g. for a test board")
HOST_HELP = HOST_REQUIRED


def open_board(host: str | None, ssh_config: Path | None) -> Device:
    return Device(open_transport(host, ssh_config))


@target_app.command("info")
def info(
    host: str | None = typer.Argument(None, help=HOST_HELP),
    ssh_config: Path | None = SSH_CONFIG,
    as_json: bool = typer.Option(False, "--json", help="print the facts as JSON"),
) -> None:
    """Model, arch, OS, boot partition, running kernel, preemption model, tryboot support."""
    board = open_board(host, ssh_config)
    try:
        f = board.facts()
    finally:
        board.t.close()
    if as_json:
        print(json.dumps(f.to_dict(), indent=1))
        return
    kb = lambda v: "?" if v is None else f"{v / 1024:,.0f} MiB free"  # noqa: E731
    rows = [
        ("board", board.name), ("model", f.model or "no device-tree model (not a Raspberry Pi?)"),
        ("arch", f.machine), ("OS", f.os or "?"), ("kernel", f"{f.release}  ({f.version})"),
        ("preemption", f.preempt_model + ("" if f.realtime is None else f", /sys/kernel/realtime = {f.realtime}")),
        ("boot partition", f"{f.boot_dir} ({kb(f.boot_free_kb)})" if f.boot_dir else "no config.txt found"),
        ("root filesystem", kb(f.root_free_kb)),
        ("tryboot", "not supported by this firmware" if not f.tryboot_supported else
         f"supported; this boot {'WAS' if f.tryboot_now else 'was not'} a try"),
        ("GRUB", "yes (grub-reboot)" if f.grub else "no"),
        ("privileges", "root" if f.is_root else "via sudo -n"),
    ]
    console = make_console()
    for k, v in rows:
        console.print(f"{k:>16}  {v}", highlight=False)


@app.command()
def deploy(
    host: str = typer.Argument(..., help=HOST_HELP),
    bundle: Path | None = typer.Argument(
        None,
        help="a Pi bundle from `rtforge kernel build` (its dist directory "
        "or tarball), or a linux-image-<release>_*.deb for a GRUB board",
    ),
    official: bool = typer.Option(
        False,
        "--official",
        help=f"install Raspberry Pi's own RT kernel ({OFFICIAL_PACKAGE}) with apt on the board instead of a bundle",
    ),
    no_try: bool = typer.Option(
        False, "--no-try", help="Pi firmware without tryboot: change config.txt directly (no automatic fallback)"
    ),
    headers: bool = typer.Option(
        False, "--headers", help="also install the bundle's linux-headers package (for DKMS modules) with apt"
    ),
    timeout: str = typer.Option("5m", "--timeout", metavar="DURATION",
                                help="how long to wait for the board to come back (90s, 5m)"),
    ssh_config: Path | None = SSH_CONFIG,
) -> int:
    """Install a kernel, boot it once (tryboot / grub-reboot), verify it is the RT kernel, then make it the default."""
    timeout_s = parse_timeout_s(timeout)
    console = make_console()
    steps = dict(
        on_step=lambda s: console.print(f"→ {s}", highlight=False),
        on_wait=lambda s: console.print(f"  waiting for {host} ({s:.0f} s)", highlight=False),
    )
    if official and bundle is not None:
        raise UserError("--official installs Raspberry Pi's RT kernel package: give either --official or a bundle")
    if official and no_try:
        raise UserError("--official needs the firmware's tryboot: it is an experimental kernel, so it is tried once")
    if headers and (official or bundle is None or bundle.suffix == ".deb"):
        raise UserError("--headers installs the headers package of a bundle from `rtforge kernel build`; "
                        "with a .deb, install its linux-headers .deb with apt")
    if official:
        board = open_board(host, ssh_config)
        try:
            result = deploy_official(board, timeout_s=timeout_s, **steps)
        finally:
            board.t.close()
    elif bundle is None:
        raise UserError("deploy what? give a bundle from `rtforge kernel build`, a linux-image-*.deb, or --official")
    elif bundle.suffix == ".deb":
        deb = read_deb(bundle)
        board = open_board(host, ssh_config)
        try:
            result = deploy_grub(board, deb, timeout_s=timeout_s, **steps)
        finally:
            board.t.close()
    else:
        b = open_bundle(bundle)
        if headers:
            try:
                headers_deb(b)  # said before the board is reached
            except UserError:
                b.close()
                raise
        board = open_board(host, ssh_config)
        if no_try:
            console.print(
                "[yellow]warning:[/yellow] --no-try: if the new kernel does not boot, the board will not "
                "fall back by itself; keep a way to reach its SD card"
            )
        try:
            result = deploy_pi(board, b, try_first=not no_try, timeout_s=timeout_s, headers=headers, **steps)
        finally:
            board.t.close()
            b.close()
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    console.print(
        ("[green]done:[/green] " if result.ok else "[red]not deployed:[/red] ") + result.message, highlight=False
    )
    return 0 if result.ok else 1


@app.command()
def kernels(
    host: str = typer.Argument(..., help=HOST_HELP),
    remove: str | None = typer.Option(
        None, "--remove", help="remove this rtforge kernel (not the running or default one)"
    ),
    ssh_config: Path | None = SSH_CONFIG,
    as_json: bool = typer.Option(False, "--json", help="print the list as JSON"),
) -> None:
    """The rtforge kernels (and Raspberry Pi's RT package) on a Pi: which is default, which is running."""
    board = open_board(host, ssh_config)
    try:
        if remove:
            pikernels.remove(board, remove)
        found, now = pikernels.installed(board)
    finally:
        board.t.close()
    if as_json:
        print(json.dumps({"default_kernel": now.kernel, "kernels": [vars(k) for k in found]}, indent=1))
        return
    console = make_console()
    if remove:
        console.print(f"removed {remove}")
    console.print(f"{board.name} boots {now.kernel} by default", highlight=False)
    for k in found:
        marks = ", ".join(m for m, on in (("default", k.default), ("running", k.running)) if on)
        console.print(f"  {k.release}  ({k.board})  {marks}", highlight=False)
    if not found:
        console.print("  no rtforge kernels installed")


@app.command()
def rollback(
    host: str = typer.Argument(..., help=HOST_HELP),
    ssh_config: Path | None = SSH_CONFIG,
) -> None:
    """Restore the boot configuration from before the last deploy (takes effect at the next reboot)."""
    board = open_board(host, ssh_config)
    try:
        backup, now = pikernels.rollback(board)
    finally:
        board.t.close()
    make_console().print(
        f"restored {backup}: {board.name} boots {now.kernel} (dtb {now.dtb}) after its next reboot", highlight=False
    )
