"""One fleet command's record, so that running it again resumes it.

    <store>/fleet/<campaign id>/campaign.json   what each board came to (written after every result)
    <store>/fleet/<campaign id>/ansible.log      Ansible's own log of the play(s)
    <store>/fleet/<campaign id>/ssh_config       the inventory's boards as ssh Host aliases
    <store>/fleet/<campaign id>/doctor/<host>.json  fleet doctor's reports

Beside the run store, so --results-dir moves a fleet's records with its
runs.  A campaign is keyed by what was asked (the command, the inventory,
the options); the same command again resumes the newest campaign of that
key while a board it names has not come to "ok", and starts a new one
when every board has (a nightly job measures anew every night) or when
--new is given.  A board's run that goes on without rtforge is recorded
with its id as soon as it is known, so a resumed campaign collects it
(`rtforge attach`) instead of measuring again.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import UserError

FORMAT_VERSION = 1
OK = "ok"


@dataclass
class BoardRecord:
    host: str
    outcome: str | None = None          # None: not yet tried in this campaign; else the module's outcome
    run_id: str | None = None           # the stored run (ok) or the run that goes on on the board (lost)
    message: str = ""
    at: str | None = None               # when the outcome was recorded (UTC)
    seconds: float | None = None
    attempts: int = 0                   # plays that tried this board
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.outcome == OK


@dataclass
class Campaign:
    id: str
    command: str
    key: str
    inventory: str
    options: dict[str, Any]
    started: str                        # ISO 8601 UTC, seconds: runs of this campaign start after it
    boards: dict[str, BoardRecord] = field(default_factory=dict)
    plays: int = 0                      # how many times the command ran for it
    format_version: int = FORMAT_VERSION
    dir: Path = field(kw_only=True)     # where it is kept (not in campaign.json: the folder is where it was read)

    def board(self, host: str) -> BoardRecord:
        return self.boards.setdefault(host, BoardRecord(host))

    def pending(self, hosts: list[str]) -> list[str]:
        return [h for h in hosts if not self.board(h).done]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("dir")
        d["boards"] = {h: asdict(b) for h, b in self.boards.items()}
        return d

    def save(self) -> None:
        paths.write_atomic(self.dir / "campaign.json", json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def read(cls, folder: Path) -> Campaign:
        try:
            d = json.loads((folder / "campaign.json").read_text())
            boards = {h: BoardRecord(**b) for h, b in d.pop("boards").items()}
            c = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "dir"}, boards=boards,
                    dir=folder)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise UserError(f"the fleet record {folder / 'campaign.json'} cannot be read ({e}): move that folder "
                            "away, or run the command with --new") from None
        if c.format_version > FORMAT_VERSION:
            raise UserError(f"the fleet record {folder} was written by a newer rtforge; upgrade rtforge")
        return c


def key_of(command: str, inventory: str, options: dict[str, Any]) -> str:
    """What was asked, as a key: the same command on the same inventory with the same options."""
    where = str(Path(inventory).resolve()) if Path(inventory).exists() else inventory
    text = json.dumps({"command": command, "inventory": where, "options": options}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fleet_dir(store_root: Path) -> Path:
    return Path(store_root) / "fleet"


def campaigns(store_root: Path) -> list[Campaign]:
    """Every readable campaign, oldest first (a damaged record is skipped, not fatal, here)."""
    base = fleet_dir(store_root)
    found = []
    for folder in sorted(base.iterdir()) if base.is_dir() else []:
        if (folder / "campaign.json").is_file():
            try:
                found.append(Campaign.read(folder))
            except UserError:
                continue
    return sorted(found, key=lambda c: (c.started, c.id))


def open_campaign(store_root: Path, command: str, inventory: str, options: dict[str, Any], hosts: list[str],
                  *, new: bool = False, resume: bool = True) -> tuple[Campaign, bool]:
    """(the campaign to work on, whether it is resumed)."""
    key = key_of(command, inventory, options)
    if resume and not new:
        same = [c for c in campaigns(store_root) if c.key == key]
        if same and same[-1].pending(hosts):
            return same[-1], True
    now = datetime.now(UTC)
    cid = f"{command}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    folder = fleet_dir(store_root) / cid
    try:
        folder.mkdir(parents=True)
        os.chmod(folder, 0o700)   # it holds an ssh config and what the boards said
    except OSError as e:
        raise UserError(paths.os_error_sentence(folder, e, "create the fleet record")) from None
    c = Campaign(cid, command, key, inventory, options, now.isoformat(timespec="seconds"), dir=folder)
    c.save()
    return c, False
