"""The life of a run, in one place: the runner contract and every
transition of a run's state.

    saved "running" (owner: this rtforge, pid + start ticks + boot id)
      -> runner started (owner: the runner, data/runner.sh)
      -> runner ended: collected -- its verdict (raw/runner/state) and the
         engine's files make the result (complete, interrupted, killed, failed)
      or the owner died (SIGKILL, power loss): *settled* by the next command
         that shows runs -- the runner's leftovers ended when the run is of
         this boot, then finished from the engine's last checkpoint (killed).

The store (results/store/runstore.py) only reads and writes files and its index;
nothing in it starts a process or sends a signal.  Settling is explicit:
the commands that show runs call ``settle`` once, here.  What runs on this
machine is always the runner rtforge ships (``runner_text``), never a copy
found in a run folder: a store copied from elsewhere is data, not code.

The runner (data/runner.sh, whose header documents its files) keeps its
bookkeeping in raw/runner/: ``state`` (one of RUNNER_STATES once it ended),
``events``, pid files and ``times``.  Runs from before the runner, and the
boot test's, have no such folder: their engine's own files decide.

One run enters the store already ended: the boot test's probe run, which
measured inside a QEMU guest (no runner, no owner this machine could check,
nothing to settle) and arrives as text on the guest's console.  It goes
through ``store_ended``: the same ``finish``, then the store's whole-or-
nothing ``add``, never a "running" state first.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from functools import cache
from importlib import resources
from pathlib import Path

from .. import paths, procfs
from ..device.transport import safesh
from ..errors import UserError
from ..results.model import RunResult
from ..results.raw.finalize import finalize
from ..results.store import rawfile
from ..results.store.runstore import Store
from .loads import STOP_GRACE_S

log = logging.getLogger("rtforge")

# The runner's final words -> result state ("done": the engine's own says).
RUNNER_STATES = {"done": "complete", "interrupted": "interrupted", "killed": "killed", "failed": "failed"}
FINAL_STATES = tuple(RUNNER_STATES)
# What a run folder holds only while its runner may need it.
RUNNER_INPUTS = ("runner.sh", "rtprobe", "nqueens", "bench.sh", "engine.cmd", "monitor.cmd", "trace.cmd", "loads",
                 "tmp")
ENGINE_STOP_S = 15.0     # a probe ends within a second of SIGTERM, cyclictest too
START_WAIT_S = 30.0      # the runner records itself and starts the engine (plus the settle time)
REAP_TIMEOUT_S = 60      # the runner's reap ends the engine (15 s) and the loads (5 s)


@cache
def runner_text() -> str:
    """The runner script with rtforge's constants and shell helpers in it (each defined once)."""
    constants = "\n".join([
        f'FINAL_STATES="{" ".join(FINAL_STATES)}"',
        f"STOP_TENTHS={round(STOP_GRACE_S * 10)}",
        f"ENGINE_STOP_TENTHS={round(ENGINE_STOP_S * 10)}",
        f"START_WAIT_TENTHS={round(START_WAIT_S * 10)}",
        f"OWNED_STATUS={safesh.OWNED_STATUS}",
    ])
    text = (resources.files("rtforge.data") / "runner.sh").read_text()
    return text.replace("@CONSTANTS@", constants, 1).replace("@SAFE@", safesh.functions(), 1)


def runner_sha256() -> str:
    """What `start` holds the runner.sh of a run folder to, before it executes it."""
    return hashlib.sha256(runner_text().encode()).hexdigest()


def packaged_runner(command: str, run_dir: str, *args: str) -> list[str]:
    """argv that runs rtforge's own runner (not a file of the run folder) on run_dir."""
    return ["sh", "-c", runner_text(), "runner", command, run_dir, *args]


# -- who owns a run ---------------------------------------------------------------
def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def owner_of(pid: int, start_ticks: int | None = None) -> dict:
    """The owner record of a process: pid, start time and this boot, so a pid
    reused after a crash or a reboot is never taken for the owner."""
    return {"pid": pid, "start_ticks": start_ticks if start_ticks is not None else procfs.start_ticks(pid),
            "boot_id": boot_id()}


def owner_alive(owner: dict | None) -> bool:
    """Whether the process an owner record names still runs (a zombie does not)."""
    if not owner or not isinstance(owner.get("pid"), int):
        return False
    if owner.get("boot_id") is not None and owner["boot_id"] != boot_id():
        return False   # recorded on another boot (or another machine): it cannot be running here
    f = procfs.stat_fields(owner["pid"])
    return bool(f) and f[0] != "Z" and int(f[19]) == owner.get("start_ticks")


def runner_owner(run_dir: Path) -> dict | None:
    """The runner's own pid record ("PID START_TICKS BOOT_ID"), or None."""
    text = rawfile.read_text(run_dir, "raw/runner/runner.pid", default=None)
    parts = (text or "").split()
    if len(parts) < 2 or not all(p.isdigit() and len(p) < 20 for p in parts[:2]):
        return None
    return {"pid": int(parts[0]), "start_ticks": int(parts[1]), "boot_id": parts[2] if len(parts) > 2 else None}


def runner_state(run_dir: Path) -> tuple[str | None, str]:
    """(word, detail) of the runner's state file; (None, '') without one."""
    try:
        text = rawfile.read_text(run_dir, "raw/runner/state", default=None)
    except rawfile.RawFileError:
        return "killed", "the runner's state file is not a file"
    if text is None:
        return None, ""
    word, _, detail = text.strip().partition(" ")
    return word, detail


# -- the end of a run ----------------------------------------------------------------
def finish(result: RunResult, run_dir: Path) -> RunResult:
    """A run whose runner has ended: its verdict, the engine's data, its notes."""
    word, detail = runner_state(run_dir)
    if word is None:
        finalize(result, run_dir, end_reason=result.end_reason)
    else:
        state = RUNNER_STATES.get(word, "killed")
        if word not in RUNNER_STATES:
            detail = "the runner ended without saying how"
        finalize(result, run_dir, state=None if state == "complete" else state, end_reason=detail or None)
    for note in (rawfile.read_text(run_dir, "raw/runner/events") or "").splitlines():
        result.warnings.append(f"{note}: see raw/loads.log of this run for why")
    if result.config.get("cpus") is None:
        result.config["cpus"] = [c.cpu for c in result.cpus]
    return result


def remove_inputs(run_dir: Path) -> None:
    """The run's programs and command files: once it ended, the store keeps
    result.json and raw/ only (what a run fetched from a board holds)."""
    for name in RUNNER_INPUTS:
        p = run_dir / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists() or p.is_symlink():
            p.unlink(missing_ok=True)


def reap_here(run_dir: Path) -> str:
    """End what a dead runner of this machine left behind (engine, loads,
    scratch files) with rtforge's own runner: 'running' when the runner
    lives on, 'reaped' otherwise.  The runner signals only processes that
    carry this run's mark, so a pid file that names another process is inert."""
    try:
        r = subprocess.run(packaged_runner("reap", str(run_dir)), capture_output=True, text=True,
                           timeout=REAP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return "failed"
    return r.stdout.strip() or "failed"


def salvage(result: RunResult, run_dir: Path) -> RunResult:
    """A run whose owner is gone: keep whatever the engine last wrote.  A run
    of this boot of this machine still has its leftovers ended -- or, when
    its runner lives on (only its rtforge was killed), it stays running,
    owned by the runner."""
    owner = result.owner or {}
    this_boot = owner.get("boot_id") in (None, boot_id())   # older results record no boot
    if this_boot and rawfile.exists(run_dir, "raw/runner/runner.pid"):
        if reap_here(run_dir) == "running":
            result.owner = runner_owner(run_dir)
            return result
    try:
        finish(result, run_dir)
        result.end_reason = result.end_reason or "rtforge was killed"
    except (UserError, rawfile.RawFileError, ValueError, KeyError, TypeError) as e:
        # damaged or hostile raw output must not hide the run: keep its metadata
        result.state = "killed"
        result.owner = None
        result.warnings = [f"the raw output could not be read ({e}); only the metadata is kept"]
    remove_inputs(run_dir)
    return result


def settle(store: Store) -> list[str]:
    """Settle every stale run in the store: stored as running, its owner
    gone.  Called once by each command that shows runs; returns their ids."""
    settled = []
    for row in store.running():   # the index alone: no folder is read for a run long finished
        try:
            result = store.load(row.run_id)
        except UserError:
            continue   # damaged meanwhile: the listing shows it so
        if result.state != "running" or owner_alive(result.owner):
            continue
        with store.writing():
            result = store.load(row.run_id)   # another rtforge may have settled it meanwhile
            if result.state != "running" or owner_alive(result.owner):
                continue
            result = salvage(result, store.run_dir(row.run_id))
            try:
                store.save(result)
            except UserError as e:   # a read-only store: shown settled, stored later
                log.warning("%s; run %s is shown finalized but stays 'running' on disk", e, row.run_id)
        settled.append(row.run_id)
    return settled


# -- a run that ended elsewhere ------------------------------------------------------
def store_ended(store: Store, result: RunResult, raw: dict[str, str]) -> RunResult:
    """Store a run that measured where neither a runner nor this rtforge
    could own it, and ended there: its engine's files (name -> text) under
    raw/, finished as every run is (``finish``: no runner's verdict, so the
    engine's own files decide), and the folder added to the store whole or
    not at all (result.run_id changes if another run took it meanwhile).

    It is never saved "running" first, unlike a run launched here: its
    owner was a guest that is gone before its files arrive, so there is no
    moment in which a crash of rtforge could lose a run still measuring, and
    nothing ``settle`` could do for it.  UserError when its files cannot be
    read as a run; nothing is left in the store then."""
    staging = store.staging()
    try:
        (staging / "raw").mkdir()
        for name, text in raw.items():
            if "/" in name or name in ("", ".", ".."):
                raise ValueError(f"a raw file is named by a plain name, not {name!r}")
            paths.write_atomic(staging / "raw" / name, text)
        finish(result, staging)
        store.add(result, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result
