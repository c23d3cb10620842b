"""What the store and the fleet records know of each board, for `rtforge
fleet report`: its newest latency run, its own cycle time, when it last
answered, and what the last fleet commands made of it.

A board's runs are found by their label (a fleet run is labelled with the
board's inventory name, then the fleet's --label) and by the run ids the
fleet records hold; runs measured by hand count when labelled that way
too (`rtforge label RUN pi-07`).  Emulated runs (QEMU boot tests) are not
a board's evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..results.model import RunResult
from ..results.store.runstore import Store
from . import settings
from .campaign import campaigns
from .inventory import Inventory


@dataclass
class BoardEvidence:
    host: str
    vars: dict[str, Any]
    cycle_ns: int | None
    board: str | None                        # rtforge_board, when the inventory says
    run: RunResult | None = None
    last_seen: str | None = None             # when it last answered a fleet command or measured (UTC)
    last: dict[str, dict] = field(default_factory=dict)   # command -> {outcome, message, at, fleet}
    doctor: dict | None = None               # the newest fleet doctor report


def _mine(host: str, label: str | None) -> bool:
    return bool(label and (label == host or label.startswith(host + " ")))


def gather(inv: Inventory, store: Store, cycle_time: str | None) -> list[BoardEvidence]:
    """One entry per inventory host, in the inventory's order."""
    rows = [r for r in store.all_rows() if r.kind == "latency"]
    records = campaigns(store.root)
    out = []
    for h in inv.hosts:
        hv = inv.vars_of(h)
        e = BoardEvidence(h, hv, settings.cycle_ns(h, hv, cycle_time), settings.board_name(h, hv))
        known_ids = {c.boards[h].run_id for c in records if h in c.boards and c.boards[h].run_id}
        seen: list[str] = []
        for c in records:   # oldest first: the newest of each command stays
            r = c.boards.get(h)
            if r is None or r.outcome is None:
                continue
            e.last[c.command] = {"outcome": r.outcome, "message": r.message, "at": r.at, "fleet": c.id}
            if r.outcome == "ok" and r.at:
                seen.append(r.at)
            report = c.dir / "doctor" / f"{h}.json"
            if c.command == "doctor" and report.is_file():
                try:
                    e.doctor = json.loads(report.read_text())
                except ValueError:
                    pass
        for row in sorted((r for r in rows if r.run_id in known_ids or _mine(h, r.label)),
                          key=lambda r: (r.start_time, r.run_id), reverse=True):
            run = store.load(row.run_id)
            if run.config.get("emulated"):
                continue
            e.run = run
            seen.append(run.start_time)
            break
        e.last_seen = max(seen) if seen else None
        out.append(e)
    return out
