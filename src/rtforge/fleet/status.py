"""The boards' states while a play runs, from the collection's events, and
what they came to: the summary's rows, the JSON result, the exit status.

An event (plugins/callback/events.py) names a host, the task's action and,
for a result, the module's return values; only the rtforge modules'
results decide a board's outcome.  A board the play never got to (a rolling
deploy stopped before its batch) is "not reached" -- not ok.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from .campaign import OK, BoardRecord, Campaign

MODULES = {f"rtforge.rtforge.{m}": m for m in ("latency", "deploy", "doctor", "fetch")}
SSH_CONFIG = "rtforge.rtforge.ssh_config"
NOT_REACHED = "not reached"     # the play stopped (max_fail_percentage) or ended before this board's turn
# what a person reads in the summary for each outcome
WORDS = {OK: "ok", "unreachable": "unreachable", "lost": "dropped mid-run", "busy": "busy with another run",
         "fell back": "fell back", "refused": "refused", "interrupted": "interrupted", "failed": "failed",
         NOT_REACHED: "not reached"}


class InventoryRefused(Exception):
    """The ssh config could not be written from the inventory: nothing was started."""


@dataclass
class Live:
    """A board during the play."""
    host: str
    state: str = "waiting"            # waiting | working | retrying | done
    since: float | None = None        # when its rtforge command started (this machine's clock)
    attempt: int = 0
    outcome: str | None = None
    message: str = ""
    run_id: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)


class Tracker:
    """Feeds events into the campaign's records, and keeps the live states for the display."""

    def __init__(self, campaign: Campaign, hosts: list[str]):
        self.campaign, self.hosts = campaign, hosts
        self.live = {h: Live(h) for h in hosts}
        self.results: dict[str, dict] = {}      # host -> the module's return values (doctor's report...)
        self.refused: str | None = None

    def apply(self, event: dict) -> Live | None:
        """Take one event; the board it changed, if any."""
        kind, host, action = event.get("event"), event.get("host"), event.get("action")
        if action == SSH_CONFIG and kind == "failed":
            self.refused = (event.get("result") or {}).get("msg") or "the inventory's ssh settings were refused"
            raise InventoryRefused(self.refused)
        if action not in MODULES or host not in self.live:
            return None
        b = self.live[host]
        result = event.get("result") or {}
        if kind == "start":
            b.state, b.since, b.attempt = "working", time.monotonic(), b.attempt + 1
        elif kind == "retry":
            b.state, b.message = "retrying", result.get("msg") or ""
            b.outcome = result.get("outcome")
        elif kind in ("ok", "failed", "skipped", "unreachable"):
            self.results[host] = result
            b.state = "done"
            b.outcome = result.get("outcome") or (OK if kind == "ok" else "skipped" if kind == "skipped" else
                                                   "failed")
            b.message = result.get("message") or result.get("msg") or ""
            b.run_id = result.get("run_id") or b.run_id
            b.summary = result.get("summary") or {}
            self._record(b, result)
        else:
            return None
        return b

    def _record(self, b: Live, result: dict) -> None:
        r = self.campaign.board(b.host)
        r.outcome, r.message, r.summary = b.outcome, b.message, b.summary
        r.run_id = b.run_id or r.run_id
        r.seconds = result.get("seconds")
        r.attempts += 1
        r.at = _now()
        self.campaign.save()   # after every board: a killed rtforge fleet loses no board's outcome

    def finish(self) -> None:
        """Boards the play left without a result: never come to (a stopped rolling deploy), or in the middle
        of their command when the play ended (Ctrl-C): a board's run then goes on there."""
        for b in self.live.values():
            if b.state == "done":
                continue
            was, b.state = b.state, "done"
            if was == "retrying":
                b.outcome = b.outcome or "failed"
            else:
                b.outcome = "interrupted" if was == "working" else NOT_REACHED
            r = self.campaign.board(b.host)
            if not r.done:
                r.outcome, r.at = b.outcome, _now()
                r.message = b.message or ("the play ended during this board's command" if was == "working"
                                          else "the play ended before this board's turn")
                r.attempts += 1 if was != "waiting" else 0
        self.campaign.save()


def _now() -> str:
    from datetime import datetime
    return datetime.now(UTC).isoformat(timespec="seconds")


def exit_status(records: list[BoardRecord]) -> int:
    """0: every board ok; 1: some board failed, fell back, dropped or was not reached."""
    return 0 if records and all(r.done for r in records) else 1


def result_json(campaign: Campaign, hosts: list[str], resumed: bool, extra: dict[str, dict] | None = None) -> dict:
    """--json: the campaign, and per board what it came to."""
    boards = []
    counts: dict[str, int] = {}
    for h in hosts:
        r = campaign.board(h)
        row = {"host": h, "outcome": r.outcome, "ok": r.done, "run_id": r.run_id, "message": r.message,
               "at": r.at, "attempts": r.attempts, "summary": r.summary}
        if extra and h in extra:
            row.update(extra[h])    # what the command adds (steps, runs fetched): never the outcome
        boards.append(row)
        outcome = r.outcome or NOT_REACHED
        counts[outcome] = counts.get(outcome, 0) + 1
    return {"fleet": campaign.id, "command": campaign.command, "inventory": campaign.inventory,
            "started": campaign.started, "resumed": resumed, "record": str(campaign.dir), "counts": counts,
            "boards": boards}
