"""`rtforge monitor fetch HOST`: the monitor's folder on a board into the
store, incrementally.

Two round trips: the board lists its files with their sizes; rtforge asks
for what it has not seen -- the appended files (windows, hours, days,
events) from where the last fetch stopped, the small replaced ones (state,
pending, evidence) whole when they changed -- and the board sends each as a
header line and its bytes.  Only whole lines are taken (a window being
written is taken next time), each record goes into the store once
(results/soak/folder.py), and the cursor is saved last: a fetch cut short
by Ctrl-C or a dropped link is simply done again.  Nothing on the board is
changed or removed; the monitor's own rotation bounds it there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..device import Transport
from ..errors import UserError
from ..results.soak.folder import MonitorFolder, host_name, wanted
from ..results.soak.windowsdb import MonitorDB

_LIST = r"""
cd "$1" 2>/dev/null || exit 3
for f in state pending.jsonl events.1.jsonl events.jsonl windows/*.jsonl hours/*.jsonl days/*.jsonl evidence/*/*; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    # size, and a checksum of its first 256 bytes: a file replaced under the same name is read again whole
    printf '%s %s %s\n' "$(wc -c < "$f" | tr -d ' ')" "$(head -c 256 "$f" | cksum | cut -d' ' -f1)" "$f"
done
exit 0
"""
# arguments: FOLDER then OFFSET NAME pairs; stdout: "F OFFSET TOTAL NAME\n" then
# TOTAL-OFFSET bytes, per file (names are the monitor's own: no spaces)
_SEND = r"""
cd "$1" 2>/dev/null || exit 3
shift
while [ $# -ge 2 ]; do
    off=$1 f=$2
    shift 2
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    total=$(wc -c < "$f" | tr -d ' ')
    [ "$off" -le "$total" ] || off=0
    printf 'F %s %s %s\n' "$off" "$total" "$f"
    tail -c +$((off + 1)) "$f" | head -c $((total - off))
done
"""


@dataclass
class Fetched:
    host: str                   # the board's folder in the store
    folder: Path
    new_windows: int = 0
    new_events: int = 0
    files: int = 0
    bad_lines: int = 0
    windows: int = 0            # all of the board's windows now in the store
    gaps: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    skipped: list[str] = field(default_factory=list)  # board files that are no monitor's


def _board_host(transport: Transport, state_dir: str) -> str:
    # bounded, regular files only: --state-dir may name a folder others can write
    data = transport.read_optional(f"{state_dir}/state", step="reading the monitor's state", limit=65536)
    hosts = [ln[5:] for ln in (data or b"").decode(errors="replace").splitlines() if ln.startswith("host ")]
    name = hosts[0].strip() if hosts else ""
    if not name:
        where = "this machine" if transport.name == "this machine" else transport.name
        raise UserError(f"no monitor has run on {where} (no {state_dir}/state): "
                        f"start one with `rtforge monitor start` or `rtforge monitor run`")
    return host_name(name)


def _parse_listing(out: str) -> dict[str, tuple[int, str]]:
    """name -> (size, checksum of its head)."""
    files = {}
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit():
            files[parts[2]] = (int(parts[0]), parts[1])
    return files


# What one round trip brings at most (before the board's own headers): a first
# fetch of months is hundreds of MB, never held in memory at once.
BATCH_BYTES = 32 << 20


def fetch(transport: Transport, store_root: Path, state_dir: str, *, on_step=lambda s: None) -> Fetched:
    host = _board_host(transport, state_dir)
    folder = MonitorFolder(store_root, host)
    res = Fetched(host, folder.path)
    on_step(f"listing the monitor's files on {transport.name}")
    r = transport.run(["sh", "-c", _LIST, "sh", state_dir], step="listing the monitor's files")
    if r.returncode:
        raise UserError(f"cannot read {state_dir} on {transport.name}: {r.stderr.strip() or r.returncode}")
    folder.save_cursor(folder.cursor())   # the folder, made (links refused) before its index opens in it
    cursor = folder.cursor()
    seen: dict[str, list] = cursor["files"]    # name -> [bytes taken, checksum of its head then]
    listing = _parse_listing(r.stdout)
    if "pending.jsonl" not in listing:  # the board filed its hour and day: so does the store
        folder.remove("pending.jsonl")
    for name in [n for n in seen if n not in listing]:  # rotated away there (kept here)
        del seen[name]
    ask = _to_ask(listing, seen, res)
    with MonitorDB.open(folder.path) as db:
        for i, batch in enumerate(_batches(ask, listing)):
            on_step(f"fetching {len(ask)} files from {transport.name}" + (f" (part {i + 1})" if i else ""))
            data = transport.run_bytes(["sh", "-c", _SEND, "sh", state_dir, *(x for off, name in batch
                                                                              for x in (str(off), name))],
                                       step="fetching the monitor's files")
            for off, total, name, blob in _split(data):
                _take(folder, db, res, seen, listing, off, total, name, blob)
            del data
            # the cursor after each part: a fetch cut short keeps what it took
            cursor.update({"files": seen, "destination": transport.name, "fetched_ns": time.time_ns()})
            folder.save_cursor(cursor)
        cursor.update({"files": seen, "destination": transport.name, "fetched_ns": time.time_ns()})
        folder.save_cursor(cursor)
        summary = db.summary()
    res.windows, res.first_ns, res.last_ns, res.gaps = summary.windows, summary.first_ns, summary.last_ns, summary.gaps
    return res


def _to_ask(listing: dict[str, tuple[int, str]], seen: dict[str, list], res: Fetched) -> list[tuple[int, str]]:
    """(offset, name) of each board file with bytes the store has not taken."""
    ask = []
    for name, (size, head) in listing.items():
        how = wanted(name)
        if how is None:
            res.skipped.append(name)
            continue
        have = seen.get(name)
        taken = have[0] if isinstance(have, list) and len(have) == 2 and isinstance(have[0], int) else None
        same = taken is not None and have is not None and have[1] == head
        if how == "append":
            # another file under the same name (events.jsonl after its rotation): from its start
            off = taken if same and taken is not None and 0 <= taken <= size else 0
            if off < size:
                ask.append((off, name))
        elif not (same and taken == size):
            ask.append((0, name))
    return ask


def _batches(ask: list[tuple[int, str]], listing: dict[str, tuple[int, str]]):
    """The asks in parts of about BATCH_BYTES each (a part holds at least one file)."""
    part: list[tuple[int, str]] = []
    size = 0
    for off, name in ask:
        n = listing[name][0] - off
        if part and size + n > BATCH_BYTES:
            yield part
            part, size = [], 0
        part.append((off, name))
        size += n
    if part:
        yield part


def _take(folder: MonitorFolder, db: MonitorDB, res: Fetched, seen: dict[str, list],
          listing: dict[str, tuple[int, str]], off: int, total: int, name: str, blob: bytes) -> None:
    """One board file's new bytes into the store's files and its index."""
    how = wanted(name)
    if how is None:
        return
    res.files += 1
    if how == "append" or name == "events.1.jsonl":
        whole = blob[:blob.rfind(b"\n") + 1]  # a line still being written: next time
        added, bad, records = folder.add_lines(name, whole)
        res.bad_lines += bad
        kind = name.split("/")[0]
        if kind == "windows":
            res.new_windows += added
            db.add_windows(records)
        elif kind in ("hours", "days"):
            db.add_rollups(records)
        else:
            res.new_events += added
            db.add_events(records)
        seen[name] = [off + len(whole), listing[name][1]] if how == "append" else [total, listing[name][1]]
    else:
        folder.put(name, blob)
        seen[name] = [total, listing[name][1]]


def _split(data: bytes):
    """(offset, total, name, bytes) per file of _SEND's answer."""
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        head = data[pos:nl].decode(errors="replace").split(" ", 3) if nl >= 0 else []
        if len(head) != 4 or head[0] != "F" or not head[1].isdigit() or not head[2].isdigit():
            raise UserError("the board's answer is not the monitor's files (a shell that prints at login?): "
                            "check the login's profile prints nothing")
        off, total, name = int(head[1]), int(head[2]), head[3]
        start = nl + 1
        end = start + (total - off)
        if end > len(data):
            raise UserError(f"the board's answer was cut off in {name}: fetch again")
        yield off, total, name, data[start:end]
        pos = end
