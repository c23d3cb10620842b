"""Fetched soak-monitor data in the run store: one folder per board,

    <store root>/monitor/<host>/windows/YYYY-MM-DD.jsonl   the board's windows, each once
    <store root>/monitor/<host>/hours/, days/             its rollups, each record once
    <store root>/monitor/<host>/events.jsonl              its events (of both board files), each once
    <store root>/monitor/<host>/evidence/<UTC start>/     alert evidence
    <store root>/monitor/<host>/state, pending.jsonl      the board's last state, as fetched
    <store root>/monitor/<host>/fetch.json                how far each board file was fetched

the same layout as the monitor's own folder on the board, so everything in
results/soak/windows.py reads both.  <host> is the board's own name (uname -n),
as runs are named.  Adding is idempotent: a window already here (same life
and number), a rollup or an event already here is not added again, so a
fetch that was cut short, or repeated from the start, adds only what is new.
The store never rotates these: the controller keeps a board's history.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ...errors import UserError
from ...paths import open_existing, sync_dir, write_atomic
from ..schema import Damaged
from .windows import NAME_RE, parse_rollup, parse_window, read_records

SUBDIR = "monitor"
_HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_EVIDENCE_RE = re.compile(r"evidence/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{6}Z(?:-[0-9]{1,2})?/"
                          r"(?:spikes\.csv|timerlat\.out|timerlat\.status)")
APPENDED = ("windows", "hours", "days")
WHOLE = ("state", "pending.jsonl", "events.1.jsonl")
MAX_EVIDENCE_BYTES = 16 << 20


def host_name(name: str) -> str:
    """A board's name as a folder name: what the board says, with anything
    that cannot be one ('/', spaces, control characters) replaced."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64].lstrip("._-") or "board"
    return safe


def wanted(rel: str) -> str | None:
    """How a board file is fetched -- 'append' (from where the last fetch
    stopped), 'whole' -- or None: not a name the monitor writes."""
    parts = rel.split("/")
    if len(parts) == 2 and parts[0] in APPENDED and NAME_RE[parts[0]].fullmatch(parts[1]):
        return "append"
    if rel == "events.jsonl":
        return "append"
    if rel in WHOLE or _EVIDENCE_RE.fullmatch(rel):
        return "whole"
    return None


class MonitorFolder:
    """A board's fetched monitor data in the store."""

    def __init__(self, store_root: Path, host: str):
        if not _HOST_RE.fullmatch(host):
            raise UserError(f"'{host}' cannot name a board's folder: use letters, digits, '.', '_' and '-'")
        self.host = host
        self.path = Path(store_root) / SUBDIR / host

    # -- what was fetched so far --------------------------------------------
    def cursor(self) -> dict:
        try:
            doc = json.loads((self.path / "fetch.json").read_text())
            return doc if isinstance(doc, dict) and isinstance(doc.get("files"), dict) else {"files": {}}
        except (OSError, ValueError):
            return {"files": {}}

    def save_cursor(self, doc: dict) -> None:
        self._mkdirs("")
        write_atomic(self.path / "fetch.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")

    # -- adding ------------------------------------------------------------------
    def _mkdirs(self, rel: str) -> Path:
        """self.path/rel, with its folder made; a link on the way is refused."""
        target = self.path / rel
        folder = target.parent if rel else target
        folder.mkdir(parents=True, exist_ok=True)
        depth = len(folder.relative_to(self.path.parent.parent).parts)  # up to <root>/monitor
        for p in [folder, *folder.parents][:depth]:
            if p.is_symlink():
                raise UserError(f"{p} is a symbolic link: the store holds no links there; remove it")
        return target

    def _append(self, rel: str, lines: list[bytes]) -> None:
        if not lines:
            return
        target = self._mkdirs(rel)
        try:
            fd = open_existing(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except OSError as e:
            raise UserError(f"cannot append to {target}: {e.strerror} (a link, a FIFO or a folder has its name); "
                            "remove it") from None
        try:
            data = b"".join(lines)
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        sync_dir(target.parent)

    def add_lines(self, rel: str, data: bytes) -> tuple[int, int, list]:
        """Complete lines of a board file into the same file here, each record
        once; returns (records added, lines that are no record, every record
        read: the caller's index adds them, each once, too)."""
        kind = rel.split("/")[0]
        parse = parse_window if kind == "windows" else parse_rollup if kind in ("hours", "days") else _event
        if kind.startswith("events"):
            rel = "events.jsonl"  # the board rotates its events into events.1.jsonl; the store keeps them in one
        here = read_records(self.path, kind if kind in APPENDED else "", parse,
                            names=[rel.split("/")[-1]] if kind in APPENDED else [rel])
        keys = {_key(r) for r in here}
        new, bad, records = [], 0, []
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                continue
            try:
                record = parse(json.loads(line))
            except (ValueError, Damaged, RecursionError):
                bad += 1
                continue
            records.append(record)
            key = _key(record)
            if key not in keys:
                keys.add(key)
                new.append(line)
        self._append(rel, new)
        return len(new), bad, records

    def remove(self, rel: str) -> None:
        try:
            (self.path / rel).unlink()
        except FileNotFoundError:
            pass

    def put(self, rel: str, data: bytes) -> None:
        """A file replaced whole (state, pending, evidence)."""
        if len(data) > MAX_EVIDENCE_BYTES and rel.startswith("evidence/"):
            data = data[:MAX_EVIDENCE_BYTES]  # rtla's output is KBs; more is not rtla's
        write_atomic(self._mkdirs(rel), data)


def _event(d):
    if not isinstance(d, dict) or not isinstance(d.get("event"), str):
        raise Damaged("not an event")
    return d


def _key(record) -> tuple:
    if isinstance(record, dict):  # an event: its kind, time and life make it unique
        return ("event", record.get("event"), record.get("t_ns"), record.get("life"))
    if hasattr(record, "n"):
        return record.key
    return (record.kind, record.key, tuple(record.lives))


def hosts(store_root: Path) -> list[str]:
    """Every board with fetched monitor data."""
    base = Path(store_root) / SUBDIR
    try:
        return sorted(p.name for p in base.iterdir()
                      if _HOST_RE.fullmatch(p.name) and p.is_dir() and not p.is_symlink())
    except OSError:
        return []


def find_host(store_root: Path, name: str) -> MonitorFolder:
    """The folder of HOST as the user names it: the board's own name, or the
    destination it was fetched from (USER@HOST, an ssh alias)."""
    known = hosts(store_root)
    bare = name.rsplit("@", 1)[-1]
    for candidate in (name, bare, host_name(bare)):
        if candidate in known:
            return MonitorFolder(store_root, candidate)
    for h in known:
        doc = MonitorFolder(store_root, h).cursor()
        if name in (doc.get("destination"), doc.get("destination", "").rsplit("@", 1)[-1]):
            return MonitorFolder(store_root, h)
    shown = ", ".join(known) if known else "none yet"
    raise UserError(f"no monitor data for '{host_name(name)}' in the store (boards with data: {shown}): "
                    f"`rtforge monitor fetch {host_name(name)}` brings it")
