"""What each fleet command asks of the play, checked before it starts:

    plan_latency / plan_deploy / plan_doctor / plan_fetch  -> Plan
    play(plan, on_update)                                  -> Tracker (what each board came to)

A plan is the campaign (new, or the one this command resumes), the boards
it must still do, and the extra variables for the collection's playbook.
Everything a user can get wrong -- the inventory, a board's rtforge_*
variables, a bundle, --serial -- is refused here, in one sentence, before
any board is touched.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..device.deploy.bundle import open_bundle
from ..device.transport.ssh import check_destination
from ..errors import UserError
from ..results.store.runstore import Store
from ..units import shown
from . import playbook, settings
from .campaign import Campaign, open_campaign
from .inventory import Inventory
from .status import InventoryRefused, Live, Tracker

DEFAULT_FORKS_MAX = 64   # the boards measure; the controller only waits (bench/fleet_scale.py: 32 at once)
RTFORGE_COMMAND = [sys.executable, "-m", "rtforge"]   # how the modules run rtforge: as this one runs
RESUMABLE = ("lost", "interrupted", "failed")   # outcomes after which a run of ours may be going on a board


@dataclass
class Plan:
    command: str
    inventory: Inventory
    campaign: Campaign
    resumed: bool
    todo: list[str]                          # boards this play works on
    extra_vars: dict[str, Any]
    forks: int
    notes: list[str] = field(default_factory=list)


def check_hosts(inv: Inventory) -> None:
    """Inventory names become ssh Host aliases and rtforge's HOST argument."""
    for h in inv.hosts:
        try:
            check_destination(h)
        except UserError:
            raise UserError(f"the inventory host '{shown(h)}' cannot be an ssh Host alias: name it with letters, "
                            "digits, '.', '_' and '-', and give its address in ansible_host") from None
        if "@" in h:
            raise UserError(f"the inventory host '{shown(h)}' holds '@': give the login in ansible_user")
        settings.retries(h, inv.vars_of(h))


def _forks(forks: int | None, n: int) -> int:
    if forks is not None and forks < 1:
        raise UserError(f"--forks {forks} is not a number of boards at once: use 1 or more")
    return forks or max(1, min(n, DEFAULT_FORKS_MAX))


def base_vars(store: Store, campaign: Campaign) -> dict[str, Any]:
    return {"rtforge_command": RTFORGE_COMMAND, "rtforge_results_dir": str(store.root),
            "rtforge_ssh_config": str(campaign.dir / "ssh_config"), "rtforge_since": campaign.started}


def run_label(host: str, label: str | None) -> str:
    """A fleet run's label, as the latency role makes it: the board's inventory name, then --label."""
    return f"{host} {label}" if label else host


def plan_latency(inv: Inventory, store: Store, given: dict[str, Any], *, label: str | None, forks: int | None,
                 retries: int | None, new: bool) -> Plan:
    check_hosts(inv)
    for h in inv.hosts:
        settings.check_latency(h, settings.latency_settings(h, inv.vars_of(h), given))
        settings.cycle_ns(h, inv.vars_of(h), None)
    asked = {k: v for k, v in given.items() if v not in (None, False)} | ({"label": label} if label else {})
    campaign, resumed = open_campaign(store.root, "latency", inv.source, asked, inv.hosts, new=new)
    notes = _collected_meanwhile(campaign, inv.hosts, store, label) if resumed else []
    todo = campaign.pending(inv.hosts)
    resume = {}
    for h in todo:
        r = campaign.board(h)
        # unreachable after a run of ours was known to go on there (cut mid-run, then tried again while
        # still down): that run is still the one to collect, not a reason to measure the board anew
        if r.outcome in RESUMABLE or (r.outcome == "unreachable" and r.run_id):
            resume[h] = r.run_id or ""
    extra = base_vars(store, campaign) | {"rtforge_resume": resume}
    for key, value in given.items():
        if value not in (None, False):
            extra[settings.LATENCY[key][0]] = value
    if label:
        extra["rtforge_run_label"] = label
    if retries is not None:
        extra["rtforge_retries"] = retries
    return Plan("latency", inv, campaign, resumed, todo, extra, _forks(forks, len(todo)), notes)


def _collected_meanwhile(campaign: Campaign, hosts: list[str], store: Store, label: str | None) -> list[str]:
    """Boards whose run of this campaign reached the store after its record last said otherwise (the
    module's answer was lost to a Ctrl-C, or `rtforge attach` brought it in by hand): they are done."""
    rows = [r for r in store.all_rows() if r.start_time >= campaign.started]
    notes = []
    for h in campaign.pending(hosts):
        rec = campaign.board(h)
        if rec.outcome is None:
            continue
        found = [r for r in rows if r.run_id == rec.run_id or (r.label == run_label(h, label) and r.kind == "latency")]
        if found:
            rec.outcome, rec.run_id, rec.message = "ok", found[-1].run_id, "found in the store"
            rec.summary = {"run_id": found[-1].run_id, "max_ns": found[-1].max_ns, "state": found[-1].state,
                           "kernel_release": found[-1].kernel_release, "preempt_model": found[-1].preempt_model}
            notes.append(f"{h}: its run {found[-1].run_id} is in the store already")
    campaign.save()
    return notes


_SERIAL = re.compile(r"^(?:[1-9][0-9]{0,5}|(?:[1-9][0-9]?|100)%)$")


def parse_serial(text: str) -> list[int | str]:
    """'1,25%' -> [1, '25%']: Ansible's serial, batch after batch (the last size repeats)."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(_SERIAL.match(p) for p in parts):
        raise UserError(f"--serial '{shown(text)}' is not a list of batch sizes: use numbers of boards or "
                        "percentages, e.g. 1,25% (one board first, then a quarter of the fleet at a time)")
    return [p if p.endswith("%") else int(p) for p in parts]


def plan_deploy(inv: Inventory, store: Store, bundle: Path | None, *, official: bool, no_try: bool, timeout: str,
                serial: str, forks: int | None, retries: int | None, new: bool) -> Plan:
    check_hosts(inv)
    batches = parse_serial(serial)
    if official and bundle is not None:
        raise UserError("--official installs Raspberry Pi's RT kernel package: give either --official or a bundle")
    bundles: dict[str, str] = {}
    for h in inv.hosts:
        given = bundle if bundle is not None else inv.vars_of(h).get(settings.BUNDLE)
        if given is None and not official:
            raise UserError(f"deploy what to {h}? give a bundle (rtforge fleet deploy INVENTORY BUNDLE), set "
                            f"{settings.BUNDLE} for it in the inventory, or pass --official")
        if given is not None:
            bundles[h] = _check_bundle(h, Path(settings.text_of(given)).expanduser(), inv.vars_of(h))
    asked = {"bundle": bundles, "official": official, "no_try": no_try, "timeout": timeout, "serial": serial}
    campaign, resumed = open_campaign(store.root, "deploy", inv.source, asked, inv.hosts, new=new)
    todo = campaign.pending(inv.hosts)
    extra = base_vars(store, campaign) | {"rtforge_serial": batches, "rtforge_max_fail_percentage": 0,
                                          "rtforge_official": official, "rtforge_no_try": no_try,
                                          "rtforge_deploy_timeout": timeout}
    if bundle is not None:
        extra["rtforge_bundle"] = bundles[inv.hosts[0]]
    if retries is not None:
        extra["rtforge_retries"] = retries
    widest = max((b for b in batches if isinstance(b, int)), default=1)
    widest = max(widest, *(round(len(todo) * int(b[:-1]) / 100) for b in batches if isinstance(b, str))) \
        if any(isinstance(b, str) for b in batches) else widest
    return Plan("deploy", inv, campaign, resumed, todo, extra, _forks(forks, max(1, min(widest, len(todo)))))


def _check_bundle(host: str, path: Path, hostvars: dict) -> str:
    """A bundle that exists and fits the board's rtforge_board; its absolute path."""
    named = shown(str(path), 200)   # from an inventory: no control characters in a message, but a path whole
    if not path.exists():
        raise UserError(f"the bundle {named} for {host} does not exist: build it with `rtforge kernel build`")
    if path.suffix == ".deb":
        return str(path.resolve())
    b = open_bundle(path)
    try:
        wanted = settings.board_name(host, hostvars)
        if wanted is not None and b.board != wanted:
            raise UserError(f"{host} is a {wanted} ({settings.BOARD}) but the bundle {named} was built for "
                            f"{b.board}: give it a {wanted} bundle in {settings.BUNDLE}")
    finally:
        b.close()
    return str(path.resolve())


def plan_simple(command: str, inv: Inventory, store: Store, extra: dict[str, Any], forks: int | None) -> Plan:
    """doctor and fetch: a new record each time, every board named."""
    check_hosts(inv)
    campaign, _ = open_campaign(store.root, command, inv.source, extra, inv.hosts, resume=False)
    return Plan(command, inv, campaign, False, list(inv.hosts), base_vars(store, campaign) | extra,
                _forks(forks, len(inv.hosts)))


def play(plan: Plan, on_update: Callable[[Live], None] | None = None,
         serve: Callable[[str, list[str]], list[str]] | None = None) -> Tracker:
    """Run the plan's playbook over its boards; the tracker holds what each came to.  Ctrl-C: the
    play is interrupted (each board's run goes on there), the record saved, Interrupted raised.
    serve: wraps the play's command line in a server of rtforge (playbook.run)."""
    tracker = Tracker(plan.campaign, plan.todo)
    plan.campaign.plays += 1
    plan.campaign.save()
    if not plan.todo:
        return tracker

    def on_event(event: dict) -> None:
        changed = tracker.apply(event)
        if changed is not None and on_update:
            on_update(changed)

    argv = playbook.playbook_argv(plan.command, plan.inventory.source, plan.campaign.dir, plan.extra_vars,
                                  plan.todo, plan.forks)
    try:
        rc = playbook.run(argv, plan.campaign.dir, on_event, serve)
    except InventoryRefused as e:
        # the inventory's fault, found before any board was touched: no record of a campaign that never began
        if not plan.resumed:
            shutil.rmtree(plan.campaign.dir, ignore_errors=True)
        raise UserError(str(e)) from None
    finally:
        if plan.campaign.dir.exists():
            tracker.finish()
    if rc not in (0, 2, 4) and not tracker.results:   # 2: some host failed, 4: unreachable; else the play itself
        raise UserError(f"ansible-playbook ended with exit status {rc} before any board: "
                        f"{_stderr_line(plan.campaign.dir)}")
    return tracker


def _stderr_line(folder: Path) -> str:
    try:
        lines = [ln.strip() for ln in (folder / "ansible.stderr").read_text().splitlines() if ln.strip()]
    except OSError:
        lines = []
    errors = [ln for ln in lines if ln.startswith("ERROR!")] or lines[-1:] or ["no message"]
    return f"{errors[0]} (the whole of it: {folder / 'ansible.stderr'})"
