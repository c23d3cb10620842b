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
one round trip.  Boot-time settings (kind "cmdline") are not in WRITERS:
they are a command line tried once at a reboot (boottime.py), so they
go first, and the runtime settings are planned again on the boot that
follows (the reboot undid them, and the IRQs may be numbered differently).
They survive reboots, so the state keeps them apart from the runtime ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from ...cpulist import format_cpulist
from ...errors import UserError
from ..state.procparse import Unread, target_cpulist, user_cpulist
from ..state.snapshot import Snapshot, parse_output, take_snapshot
from ..state.tunestate import STATE_PATH, SavedSetting, TuneState, load_state, parse_state, save_state
from ..transport import safesh
from ..transport.device import Device
from . import boottime
from .boottime import BootResult
from .operations import ONLINE, OPERATIONS, Change, boot_isolated, operation_names, unread_notes

# $1 root, then path value pairs.  tee (not the shell's printf) reports the
# kernel's reason when a write is refused (dash only says "I/O error").
# Under a tree (--sysroot) a file is written only when its real path stays
# inside the tree (a link to the machine's own /proc is refused), and only a
# regular file is written or read (a FIFO would block): data/safe.sh.
_WRITE_FILES = safesh.script(r"""
R="$1"; shift; RTFORGE_ROOT="$R"
while [ $# -ge 2 ]; do
  p="$1"; v="$2"; shift 2
  if [ ! -e "$R$p" ]; then printf '@@gone %s\n' "$p"; continue; fi
  if [ ! -f "$R$p" ] || ! rtforge_inside "$R$p"; then
    printf '@@err %s\t%s\n' "$p" "not a regular file inside the target's tree (a link out of it, a FIFO?)"; continue
  fi
  if err=$(printf '%s\n' "$v" | tee "$R$p" 2>&1 >/dev/null); then printf '@@ok %s\n' "$p"
  else printf '@@err %s\t%s\n' "$p" "$(printf '%s' "$err" | tr '\n' ' ')"; fi
done
""")
# What is read back: the snapshot's file blocks (facts.MARK first), for its parser.
_READ_FILES = safesh.script(r"""
R="$1"; shift; RTFORGE_ROOT="$R"
for p in "$@"; do if [ -r "$R$p" ] && [ -f "$R$p" ]; then printf '\n\000@@f %s\n' "$p"; rtforge_cat "$R$p"; fi; done
""")
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


class Writer(Protocol):
    """One kind of runtime setting: its values written, then read back, one round trip each."""

    def write(self, board: Device, pairs: list[tuple[str, str]]) -> tuple[dict[str, str | None], set[str]]:
        """({target: error or None}, the targets that are gone)."""
        ...

    def read(self, board: Device, targets: list[str]) -> dict[str, str | None]:
        """{target: its value now (None: unreadable)}."""
        ...


class FileWriter:
    def write(self, board: Device, pairs: list[tuple[str, str]]) -> tuple[dict[str, str | None], set[str]]:
        argv = ["sh", "-c", _WRITE_FILES, "sh", board.root] + [x for p in pairs for x in p]
        return _parse_results(board.t.run(argv, sudo=True, check=True, step="writing the settings").stdout)

    def read(self, board: Device, targets: list[str]) -> dict[str, str | None]:
        """The same reading (and stripping) as the snapshot the plan came from."""
        argv = ["sh", "-c", _READ_FILES, "sh", board.root, *targets]
        got = parse_output(board.t.run(argv, check=True, step="reading the settings back").stdout, board.root)
        return {t: got.value(t) for t in targets}


class WifiWriter:
    def write(self, board: Device, pairs: list[tuple[str, str]]) -> tuple[dict[str, str | None], set[str]]:
        argv = ["sh", "-c", _WIFI, "sh", "set"] + [f"{i}={v}" for i, v in pairs]
        return _parse_results(board.t.run(argv, sudo=True, check=True, step="setting Wi-Fi power save").stdout)

    def read(self, board: Device, targets: list[str]) -> dict[str, str | None]:
        return _parse_values(board.t.run(["sh", "-c", _WIFI, "sh", "get", *targets], check=True,
                                         step="reading Wi-Fi power save").stdout)


WRITERS: dict[str, Writer] = {"file": FileWriter(), "wifi": WifiWriter()}


def _by_kind(items: list) -> dict[str, list]:
    """Changes or saved settings by the kind of their writer."""
    groups: dict[str, list] = {}
    for it in items:
        groups.setdefault(it.kind, []).append(it)
    return groups


def _write(board: Device, items: list, value_of) -> tuple[dict[str, str | None], set[str]]:
    """Write each item's value (value_of(item)) through its writer; {key: error}."""
    errors, gone = {}, set()
    for kind, group in _by_kind(items).items():
        errs, g = WRITERS[kind].write(board, [(it.target, value_of(it)) for it in group])
        errors.update({f"{kind}:{t}": e for t, e in errs.items()})
        gone |= {f"{kind}:{t}" for t in g}
    return errors, gone


def _read(board: Device, items: list) -> dict[str, str | None]:
    values = {}
    for kind, group in _by_kind(items).items():
        got = WRITERS[kind].read(board, [it.target for it in group])
        values.update({f"{kind}:{t}": v for t, v in got.items()})
    return values


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _require_root(board: Device) -> None:
    board.t.run(["true"], sudo=True, check=True, step=f"getting root on {board.name} (sudo -n)")


_save = save_state


def _boot_id(snap: Snapshot) -> str:
    return snap.value("/proc/sys/kernel/random/boot_id") or ""


# -- plan and apply -------------------------------------------------------------
@dataclass
class Plan:
    changes: list[Change]
    notes: dict[str, list[str]]          # per operation: why it has nothing (more) to do
    isolate: set[int]
    snap: Snapshot
    isolate_given: bool = False
    only: list[str] | None = None


BOOT_NOTE = "changes the kernel command line and reboots: only with --isolate CPUS (or --only boot-cmdline)"


def plan(board: Device, *, isolate: str | None = None, only: list[str] | None = None) -> Plan:
    unknown = sorted(set(only or []) - set(operation_names()))
    if unknown:
        raise UserError(f"--only {','.join(unknown)}: no such operation; choose from {', '.join(operation_names())}")
    snap = take_snapshot(board.t, board.root)
    unread: Unread = []
    online = target_cpulist(snap.value(ONLINE), ONLINE, unread)
    cpus = user_cpulist(isolate, online) if isolate is not None else boot_isolated(snap, unread)
    changes, notes = [], {}
    for op in OPERATIONS:
        if only and op.name not in only:
            continue
        if op.boot and isolate is None and not only:   # a plain `rtforge tune` never reboots the board
            notes[op.name] = [BOOT_NOTE]
            continue
        c, n = op.plan(snap, cpus)
        if op.isolates:
            n = list(dict.fromkeys(unread_notes(unread) + n))
        changes += c
        notes[op.name] = n if (c or n) else ["already as wanted"]
    return Plan(changes, notes, cpus, snap, isolate is not None, only)


@dataclass
class ApplyResult:
    applied: list[Change] = field(default_factory=list)
    failed: list[tuple[Change, str]] = field(default_factory=list)
    boot: BootResult | None = None
    replanned: Plan | None = None      # the runtime plan made again after the boot-time try's reboot


def apply(board: Device, p: Plan, *, on_step: Callable[[str], None] | None = None,
          on_wait: Callable[[float], None] | None = None) -> ApplyResult:
    """Boot-time words first (a try reboots), then the runtime settings."""
    result = ApplyResult()
    if not p.changes:
        return result
    _require_root(board)
    boot = [c for c in p.changes if c.kind == "cmdline"]
    runtime = [c for c in p.changes if c.kind != "cmdline"]
    snap = p.snap
    if boot:
        try:
            result.boot = boottime.apply(board, boot, on_step=on_step, on_wait=on_wait)
        except UserError as e:                   # refused before anything changed
            result.boot = BootResult(False, str(e))
        if result.boot.ok:
            result.applied += boot
        else:
            result.failed += [(c, result.boot.message) for c in boot]
        if result.boot.rebooted and runtime:
            if not result.boot.ok:
                result.failed += [(c, "not applied: the boot-time try failed") for c in runtime]
                return result
            ops = sorted({c.op for c in runtime})
            result.replanned = plan(board, isolate=format_cpulist(p.isolate) if p.isolate_given else None, only=ops)
            runtime, snap = result.replanned.changes, result.replanned.snap
    if runtime:
        _apply_runtime(board, runtime, snap, p.isolate, result)
    return result


def _apply_runtime(board: Device, changes: list[Change], snap: Snapshot, isolate: set[int],
                   result: ApplyResult) -> None:
    """Save the values before, write, read back, keep in the state what changed."""
    boot_id = _boot_id(snap)
    old = load_state(board)           # not the snapshot's: the boot-time part may have written it since
    state = old if old and old.boot_id == boot_id else \
        TuneState(boot_id=boot_id, created=_now(), boot=old.boot if old else [],
                  boot_before=old.boot_before if old else None)
    known = state.by_key()
    for c in changes:
        if c.key in known:
            known[c.key].applied = c.wanted          # the first before-value stays
        else:
            state.settings.append(SavedSetting(c.op, c.kind, c.target, c.before, c.wanted, c.label))
    if any(c.op == "irq-affinity" for c in changes):
        state.isolate = sorted(set(state.isolate) | isolate)
    state.updated = _now()
    _save(board, state)                               # before anything changes
    errors, _ = _write(board, changes, lambda c: c.wanted)
    now = _read(board, changes)
    dropped = set()
    for c in changes:
        if now.get(c.key) == c.wanted:
            result.applied.append(c)
            continue
        why = errors.get(c.key) or f"reads back {now.get(c.key)!r}"
        result.failed.append((c, why))
        if now.get(c.key) == c.before and c.key not in known:
            dropped.add(c.key)                        # unchanged: nothing to revert
    state.settings = [s for s in state.settings if s.key not in dropped]
    _save(board, state)


# -- show and revert ---------------------------------------------------------------
@dataclass
class Status:
    setting: SavedSetting
    now: str | None
    state: str            # applied | changed-since | gone


@dataclass
class ShowResult:
    state: TuneState | None
    rebooted: bool = False          # the runtime settings were applied in an earlier boot: gone
    rows: list[Status] = field(default_factory=list)
    boot_rows: list[tuple[SavedSetting, bool]] = field(default_factory=list)   # (word, in the running kernel)


def show(board: Device) -> ShowResult:
    snap = take_snapshot(board.t, board.root)
    st = parse_state(snap.text(STATE_PATH))
    if st is None:
        return ShowResult(None)
    has = boottime.running_has(board, st.boot) if st.boot else {}
    result = ShowResult(st, boot_rows=[(s, has[s.key]) for s in st.boot])
    if st.settings and st.boot_id != _boot_id(snap):
        result.rebooted = True
        return result
    now = _read(board, st.settings)
    for s in st.settings:
        v = now.get(s.key)
        result.rows.append(Status(s, v, "gone" if v is None else "applied" if v == s.applied else "changed-since"))
    return result


@dataclass
class RevertResult:
    state: TuneState | None
    rebooted: bool = False
    restored: list[SavedSetting] = field(default_factory=list)
    gone: list[SavedSetting] = field(default_factory=list)
    boot: BootResult | None = None          # the command line restored (tried once: tryboot or grub-reboot)


def revert(board: Device, *, on_step: Callable[[str], None] | None = None,
           on_wait: Callable[[float], None] | None = None) -> RevertResult:
    """Runtime settings first (they belong to this boot), then the command line."""
    snap = take_snapshot(board.t, board.root)
    st = parse_state(snap.text(STATE_PATH))
    if st is None:
        return RevertResult(None)
    _require_root(board)
    result = RevertResult(st)
    if st.settings and st.boot_id != _boot_id(snap):
        result.rebooted = True          # the reboot already undid every runtime setting
    elif st.settings:
        _revert_runtime(board, st, result)
    st.settings = []
    _save(board, st)
    if st.boot_before:
        result.boot = boottime.revert(board, st, on_step=on_step, on_wait=on_wait)
    return result


def _revert_runtime(board: Device, st: TuneState, result: RevertResult) -> None:
    todo = [s for s in reversed(st.settings) if s.before is not None]
    _, gone = _write(board, todo, lambda s: s.before)
    now = _read(board, todo)
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
