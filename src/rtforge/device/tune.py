"""rtforge tune: apply the fixes doctor names, reversibly.

plan → apply → (show) → revert.  The value of every setting before rtforge
first changed it is saved on the target (tunestate.STATE_PATH, written
atomically) *before* anything is written, so a tune interrupted half-way can
still be reverted; after the writes every setting is read back, and one the
kernel refused (a managed or per-CPU interrupt, say) is dropped from the
state again if it did not change.  `revert` writes the saved values back,
reads them back and removes the state only when every one is exactly as
before.  Runtime settings are gone after a reboot, so a state from an
earlier boot is only reported, never written back (IRQ numbers may mean
other devices now).

Writers: one per kind of setting, each batching its reads and writes into
one round trip.  A boot-time writer (kind "cmdline") will join WRITERS; it
writes no file in place but a command line to try once (see tuneops.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..errors import UserError
from .target import Target
from .procparse import parse_cpulist, user_cpulist
from .snapshot import Snapshot, parse_output, take_snapshot
from .tuneops import OPERATIONS, Change, boot_isolated, operation_names
from .tunestate import STATE_PATH, SavedSetting, TuneState, parse_state

# $1 root, then path value pairs.  tee (not the shell's printf) reports the
# kernel's reason when a write is refused (dash only says "I/O error").
_WRITE_FILES = r"""
R="$1"; shift
while [ $# -ge 2 ]; do
  p="$1"; v="$2"; shift 2
  if [ ! -e "$R$p" ]; then printf '@@gone %s\n' "$p"; continue; fi
  if err=$(printf '%s\n' "$v" | tee "$R$p" 2>&1 >/dev/null); then printf '@@ok %s\n' "$p"
  else printf '@@err %s\t%s\n' "$p" "$(printf '%s' "$err" | tr '\n' ' ')"; fi
done
"""
_READ_FILES = r"""
R="$1"; shift
for p in "$@"; do if [ -r "$R$p" ]; then printf '\n@@f %s\n' "$p"; cat "$R$p"; fi; done
"""
_WIFI = r"""
op="$1"; shift
for i in "$@"; do
  if [ "$op" = get ]; then printf '@@f %s\t' "$i"; iw dev "$i" get power_save 2>&1 | sed -n 's/.*Power save: *//p'
  else v="${i#*=}"; i="${i%%=*}"
    if err=$(iw dev "$i" set power_save "$v" 2>&1); then printf '@@ok %s\n' "$i"
    else printf '@@err %s\t%s\n' "$i" "$(printf '%s' "$err" | tr '\n' ' ')"; fi
  fi
done
"""


def _parse_results(out: str) -> tuple[dict[str, str | None], set[str]]:
    """'@@ok T' / '@@err T\\tmsg' / '@@gone T' lines -> ({target: error or None}, gone)."""
    errors, gone = {}, set()
    for line in out.splitlines():
        m = re.match(r"@@(ok|err|gone) ([^\t]*)(?:\t(.*))?$", line)
        if m:
            if m[1] == "gone":
                gone.add(m[2])
            errors[m[2]] = None if m[1] == "ok" else (m[3] or "no such file")
    return errors, gone


def _parse_values(out: str) -> dict[str, str | None]:
    values = {}
    for line in out.splitlines():
        m = re.match(r"@@f ([^\t]*)\t(.*)$", line)
        if m:
            values[m[1]] = m[2].strip() or None
    return values


class FileWriter:
    def write(self, board: Target, pairs: list[tuple[str, str]]) -> tuple[dict[str, str | None], set[str]]:
        argv = ["sh", "-c", _WRITE_FILES, "sh", board.root] + [x for p in pairs for x in p]
        return _parse_results(board.t.run(argv, sudo=True, check=True, step="writing the settings").stdout)

    def read(self, board: Target, targets: list[str]) -> dict[str, str | None]:
        """The same reading (and stripping) as the snapshot the plan came from."""
        argv = ["sh", "-c", _READ_FILES, "sh", board.root, *targets]
        got = parse_output(board.t.run(argv, check=True, step="reading the settings back").stdout, board.root)
        return {t: got.value(t) for t in targets}


class WifiWriter:
    def write(self, board, pairs):
        argv = ["sh", "-c", _WIFI, "sh", "set"] + [f"{i}={v}" for i, v in pairs]
        return _parse_results(board.t.run(argv, sudo=True, check=True, step="setting Wi-Fi power save").stdout)

    def read(self, board, targets):
        return _parse_values(board.t.run(["sh", "-c", _WIFI, "sh", "get", *targets], check=True,
                                         step="reading Wi-Fi power save").stdout)


WRITERS = {"file": FileWriter(), "wifi": WifiWriter()}


def _by_kind(items):
    groups: dict[str, list] = {}
    for it in items:
        groups.setdefault(it.kind, []).append(it)
    return groups


def _write(board: Target, items: list, value_of) -> tuple[dict[str, str | None], set[str]]:
    """Write each item's value (value_of(item)) through its writer; {key: error}."""
    errors, gone = {}, set()
    for kind, group in _by_kind(items).items():
        errs, g = WRITERS[kind].write(board, [(it.target, value_of(it)) for it in group])
        errors.update({f"{kind}:{t}": e for t, e in errs.items()})
        gone |= {f"{kind}:{t}" for t in g}
    return errors, gone


def _read(board: Target, items: list) -> dict[str, str | None]:
    values = {}
    for kind, group in _by_kind(items).items():
        got = WRITERS[kind].read(board, [it.target for it in group])
        values.update({f"{kind}:{t}": v for t, v in got.items()})
    return values


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _require_root(board: Target) -> None:
    board.t.run(["true"], sudo=True, check=True, step=f"getting root on {board.name} (sudo -n)")


def _save(board: Target, state: TuneState | None) -> None:
    path = board.path(STATE_PATH)
    if state is None or not state.settings:
        board.t.run(["rm", "-f", "--", path], sudo=True, check=True, step=f"removing {STATE_PATH}")
        return
    board.t.run(["mkdir", "-p", "--", path.rsplit("/", 1)[0]], sudo=True, check=True, step="creating /var/lib/rtforge")
    board.t.write_bytes(path, state.to_json().encode(), sudo=True, step=f"saving {STATE_PATH}")


def _boot_id(snap: Snapshot) -> str:
    return snap.value("/proc/sys/kernel/random/boot_id") or ""


# -- plan and apply -------------------------------------------------------------
@dataclass
class Plan:
    changes: list[Change]
    notes: dict[str, list[str]]          # per operation: why it has nothing (more) to do
    isolate: set[int]
    snap: Snapshot


def plan(board: Target, *, isolate: str | None = None, only: list[str] | None = None) -> Plan:
    unknown = sorted(set(only or []) - set(operation_names()))
    if unknown:
        raise UserError(f"--only {','.join(unknown)}: no such operation; choose from {', '.join(operation_names())}")
    snap = take_snapshot(board.t, board.root)
    try:
        online = parse_cpulist(snap.value("/sys/devices/system/cpu/online"))
    except ValueError:
        online = set()
    cpus = user_cpulist(isolate, online) if isolate is not None else boot_isolated(snap)
    changes, notes = [], {}
    for op in OPERATIONS:
        if only and op.name not in only:
            continue
        c, n = op.plan(snap, cpus)
        changes += c
        notes[op.name] = n if (c or n) else ["already as wanted"]
    return Plan(changes, notes, cpus, snap)


@dataclass
class ApplyResult:
    applied: list[Change] = field(default_factory=list)
    failed: list[tuple[Change, str]] = field(default_factory=list)


def apply(board: Target, p: Plan) -> ApplyResult:
    """Save the values before, write, read back, keep in the state what changed."""
    result = ApplyResult()
    if not p.changes:
        return result
    _require_root(board)
    boot_id = _boot_id(p.snap)
    old = parse_state(p.snap.text(STATE_PATH))
    state = old if old and old.boot_id == boot_id else TuneState(boot_id=boot_id, created=_now())
    known = state.by_key()
    for c in p.changes:
        if c.key in known:
            known[c.key].applied = c.wanted          # the first before-value stays
        else:
            state.settings.append(SavedSetting(c.op, c.kind, c.target, c.before, c.wanted, c.label))
    if any(c.op == "irq-affinity" for c in p.changes):
        state.isolate = sorted(set(state.isolate) | p.isolate)
    state.updated = _now()
    _save(board, state)                               # before anything changes
    errors, _ = _write(board, p.changes, lambda c: c.wanted)
    now = _read(board, p.changes)
    dropped = set()
    for c in p.changes:
        if now.get(c.key) == c.wanted:
            result.applied.append(c)
            continue
        why = errors.get(c.key) or f"reads back {now.get(c.key)!r}"
        result.failed.append((c, why))
        if now.get(c.key) == c.before and c.key not in known:
            dropped.add(c.key)                        # unchanged: nothing to revert
    state.settings = [s for s in state.settings if s.key not in dropped]
    _save(board, state)
    return result


# -- show and revert ---------------------------------------------------------------
@dataclass
class Status:
    setting: SavedSetting
    now: str | None
    state: str            # applied | changed-since | gone


@dataclass
class ShowResult:
    state: TuneState | None
    rebooted: bool = False
    rows: list[Status] = field(default_factory=list)


def show(board: Target) -> ShowResult:
    snap = take_snapshot(board.t, board.root)
    st = parse_state(snap.text(STATE_PATH))
    if st is None:
        return ShowResult(None)
    if st.boot_id != _boot_id(snap):
        return ShowResult(st, rebooted=True)
    now = _read(board, st.settings)
    rows = []
    for s in st.settings:
        v = now.get(s.key)
        rows.append(Status(s, v, "gone" if v is None else "applied" if v == s.applied else "changed-since"))
    return ShowResult(st, rows=rows)


@dataclass
class RevertResult:
    state: TuneState | None
    rebooted: bool = False
    restored: list[SavedSetting] = field(default_factory=list)
    gone: list[SavedSetting] = field(default_factory=list)


def revert(board: Target) -> RevertResult:
    snap = take_snapshot(board.t, board.root)
    st = parse_state(snap.text(STATE_PATH))
    if st is None:
        return RevertResult(None)
    _require_root(board)
    if st.boot_id != _boot_id(snap):
        _save(board, None)              # the reboot already undid every runtime setting
        return RevertResult(st, rebooted=True)
    todo = [s for s in reversed(st.settings) if s.before is not None]
    _, gone = _write(board, todo, lambda s: s.before)
    now = _read(board, todo)
    result = RevertResult(st)
    left = []
    for s in todo:
        if s.key in gone:
            result.gone.append(s)
        elif now.get(s.key) == s.before:
            result.restored.append(s)
        else:
            left.append(s)
    if left:
        st.settings = [s for s in st.settings if s in left]
        _save(board, st)
        shown = "; ".join(f"{s.label or s.target} is {now.get(s.key)!r}, was {s.before!r}" for s in left)
        raise UserError(f"could not restore {len(left)} setting(s) on {board.name}: {shown}; they stay in "
                        f"{STATE_PATH}: run rtforge tune --revert again, or set them by hand")
    _save(board, None)
    return result
