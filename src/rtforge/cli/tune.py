"""rtforge tune: apply doctor's fixes reversibly (runtime settings, and with --isolate the kernel command
line, tried once at a reboot); --show, --revert, --dry-run."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ..device.state.procparse import format_cpulist
from ..device.state.tunestate import STATE_PATH
from ..device.tune import engine as tuning
from ..device.tune.operations import OPERATIONS, operation_names
from ..errors import UserError
from ..units import plural
from .device import HOST_HELP, SSH_CONFIG
from .doctor import SYSROOT, board_for, host_arg
from .render import make_console

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


OPS_HELP = "only these operations, comma-separated: " + ", ".join(operation_names())


@app.command()
def tune(
    host: str | None = typer.Argument(None, help=HOST_HELP),
    isolate: str | None = typer.Option(None, "--isolate", metavar="CPUS",
                                          help="CPUs for RT work: interrupts are moved off them, and isolcpus=, "
                                               "nohz_full=, rcu_nocbs=, irqaffinity= go on the kernel command line "
                                               "(tried once at a reboot; default: the CPUs isolated at boot, and no "
                                               "command line change)"),
    only: str | None = typer.Option(None, "--only", metavar="OPS", help=OPS_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, change nothing"),
    show: bool = typer.Option(False, "--show", help="what rtforge tune has applied, and whether it still is"),
    revert: bool = typer.Option(False, "--revert",
                                help="restore exactly the values from before the first tune (the kernel command "
                                     "line: tried once, as it was applied)"),
    sysroot: Path | None = SYSROOT,
    ssh_config: Path | None = SSH_CONFIG,
) -> int:
    """Apply doctor's fixes (governor, IRQ affinity, RT throttling, Wi-Fi power save; with --isolate also the kernel
    command line); the values before are saved on the target, so --revert restores them exactly."""
    modes = [name for name, on in (("--show", show), ("--revert", revert), ("--dry-run", dry_run)) if on]
    if len(modes) > 1:
        raise UserError(f"{' and '.join(modes)} exclude each other: give one")
    if (show or revert) and (isolate or only):
        raise UserError(f"{modes[0]} takes no --isolate or --only: it works on what was applied")
    ops = [o.strip() for o in only.split(",") if o.strip()] if only else None
    board = board_for(host, ssh_config, sysroot)
    c = make_console()
    where = f"{board.name}:{board.path(STATE_PATH)}"
    try:
        if show:
            _show(c, tuning.show(board), host)
        elif revert:
            _revert(c, tuning.revert(board), host)
        else:
            plan = tuning.plan(board, isolate=isolate, only=ops)
            _print_plan(c, plan, dry_run)
            if dry_run or not plan.changes:
                return 0
            result = tuning.apply(board, plan, on_step=lambda name: c.print(f"  {escape(name)}", highlight=False))
            if result.boot:
                color = "green" if result.boot.ok else "yellow"
                c.print(f"[{color}]kernel command line:[/{color}] {escape(result.boot.message)}", highlight=False)
            if result.replanned:
                c.print(f"after the reboot, runtime settings planned again: {len(result.replanned.changes)} to change",
                        highlight=False)
            total = len(result.applied) + len(result.failed)
            for ch, why in result.failed:
                c.print(f"[yellow]not changed:[/yellow] {escape(ch.label or ch.target)}: {escape(why)}",
                        highlight=False)
            c.print(f"applied {len(result.applied)} of {total}; the values before are saved in {where}: "
                    f"undo with rtforge tune {host_arg(host)}--revert", highlight=False)
            # Like a deploy that fell back: the isolation asked for is not in place.  A runtime
            # setting the kernel refuses (a managed IRQ's affinity) is named above but does not
            # fail the command: isolcpus=managed_irq is the fix for those, and it boots.
            return 1 if result.boot and not result.boot.ok else 0
    finally:
        board.t.close()
    return 0


def _print_plan(c, plan: tuning.Plan, dry_run: bool) -> None:
    titles = {op.name: op.title for op in OPERATIONS}
    if plan.isolate:
        c.print(f"RT CPUs: {format_cpulist(plan.isolate)}", highlight=False)
    verb = "would change" if dry_run else "changing"
    for name, notes in plan.notes.items():
        changes = [ch for ch in plan.changes if ch.op == name]
        c.print(f"[bold]{name}[/bold] ({titles[name]}): " + (f"{verb} {len(changes)}" if changes else
                                                              "nothing to do"), highlight=False)
        for ch in changes:
            where = "kernel command line" if ch.kind == "cmdline" else ch.target
            before = "(not set)" if ch.before is None else escape(str(ch.before))
            c.print(f"    {escape(ch.label or ch.target)}: {before} -> {escape(ch.wanted)}   ({escape(where)})",
                    highlight=False)
        for n in notes:
            c.print(f"    [dim]{escape(n)}[/dim]", highlight=False)


def _show(c, r: tuning.ShowResult, host: str | None) -> None:
    if r.state is None:
        c.print("nothing applied by rtforge tune here", highlight=False)
        return
    for s, running in r.boot_rows:
        mark = "[green]in the running kernel[/green]" if running else "[yellow]not in the running kernel[/yellow]"
        c.print(f"  {mark}  kernel command line: {escape(s.applied)} (before: {escape(str(s.before))})",
                highlight=False)
    if r.boot_rows and not all(running for _, running in r.boot_rows):
        c.print("  [dim]a word not in the running kernel takes effect at the next boot (GRUB) or was changed "
                "since[/dim]", highlight=False)
    if r.rebooted:
        c.print(f"rtforge tune applied {plural(len(r.state.settings), 'runtime setting')} at {r.state.updated}, "
                f"but the target has rebooted since: they are gone; rtforge tune {host_arg(host)}--revert clears "
                "the record",
                highlight=False)
        return
    if not r.state.settings:
        return
    c.print(f"applied by rtforge tune at {r.state.updated} (RT CPUs: {format_cpulist(set(r.state.isolate)) or '-'}):",
            highlight=False)
    marks = {"applied": "[green]applied[/green]", "changed-since": "[yellow]changed since[/yellow]",
             "gone": "[dim]gone[/dim]"}
    for row in r.rows:
        s = row.setting
        c.print(f"  {marks[row.state]}  {s.op}: {escape(s.label or s.target)}: {escape(str(s.before))} -> "
                f"{escape(s.applied)}" + ("" if row.state == "applied" else f" (now {escape(str(row.now))})"),
                highlight=False)


def _revert(c, r: tuning.RevertResult, host: str | None) -> None:
    if r.state is None:
        c.print("nothing to revert: rtforge tune has changed nothing here", highlight=False)
        return
    if r.rebooted:
        c.print("the target has rebooted since rtforge tune: its runtime settings are already gone; "
                "cleared the record", highlight=False)
    elif r.restored or r.gone:
        c.print(f"restored {plural(len(r.restored), 'setting')} to their values from before {r.state.created}",
                highlight=False)
    if r.boot:
        c.print(f"kernel command line: {escape(r.boot.message)}", highlight=False)
    for s in r.gone:
        c.print(f"  [dim]{escape(s.label or s.target)}: no longer there, nothing to restore[/dim]", highlight=False)
