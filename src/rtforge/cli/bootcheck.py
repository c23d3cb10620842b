"""rtforge bootcheck: which kernel, dtb, initramfs and cmdline a Pi would boot, and why."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..device.firmware.bootcfg import BootChoice, check, resolve
from ..device.firmware.pimodels import pi_model, pi_models
from ..errors import UserError

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


MODEL_HELP = "board model, named like its config.txt filter: " + ", ".join(pi_models())


def render(c: BootChoice) -> str:
    """One block per boot mode: each file, then the line (or default) that
    chose it.  ASCII only, so no terminal encoding can make it fail."""
    mode = "tryboot (after reboot '0 tryboot')" if c.tryboot else "normal boot"
    out = [f"{mode}: {c.model} ({pi_model(c.model).title}) reads {c.config}"]
    rows = [("kernel", c.kernel), ("dtb", c.dtb), ("initramfs", c.initramfs), ("cmdline", c.cmdline_file)]
    for name, value in rows:
        out.append(f"  {name:<10} {value or '-'}")
        out.append(f"  {'':<10}   because: {c.reasons.get(name, '')}")
        if name == "cmdline" and c.cmdline is not None:
            out.append(f"  {'':<10}   text: {c.cmdline}")
    out.append(f"  {'overlays':<10} {c.overlays}")
    out.append(f"  {'':<10}   because: {c.reasons.get('overlays', '')}")
    out.append(f"  {'64-bit':<10} {'yes' if c.arm_64bit else 'no'}")
    out.append(f"  {'':<10}   because: {c.reasons.get('arm_64bit', '')}")
    out += [f"  warning: {w}" for w in c.warnings] or ["  no warnings"]
    return "\n".join(out)


@app.command()
def bootcheck(
    boot_dir: Path = typer.Argument(..., help="the boot partition, e.g. /media/$USER/bootfs or /boot/firmware"),
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    as_json: bool = typer.Option(False, "--json", help="print {normal, tryboot} as JSON"),
) -> None:
    """Which kernel, dtb, initramfs and cmdline the firmware would use, normal and tryboot, and why."""
    pi_model(model)
    if not boot_dir.is_dir():
        raise UserError(f"{boot_dir} is not a directory: give the mounted boot partition "
                        "(e.g. /media/$USER/bootfs or /boot/firmware)")
    if as_json:
        print(json.dumps(check(boot_dir, model), indent=1))
        return
    check(boot_dir, model)  # the same refusals as --json (no config.txt)
    print(render(resolve(boot_dir, model)))
    print()
    print(render(resolve(boot_dir, model, tryboot=True)))
