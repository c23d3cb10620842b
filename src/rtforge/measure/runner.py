"""One run's directory on a target -- a board or this machine -- driven
through its runner (data/runner.sh, whose header documents the files and
states) over a Transport: poll the state and the engine's new progress
lines, stop the run, end what a killed runner left behind, and bring the
run into the store.

A board's run lives under BASE_DIR there (root's own folder, checked before
every command that acts: data/safe.sh) and is fetched when it ends, every
file checked against the board's own sha256 before the board's copy is
removed.  What runs there is always rtforge's own runner text, never a
runner.sh found on the board.  A run on this machine lives in its folder of the store (BASE is
the store's root), so bringing it in is finishing it in place.  Nothing
here needs a connection to stay up between calls: a handle is just the run
id, so `attach` and `fetch` build one from scratch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..device import ConnectionLost, LocalTransport, Transport
from ..device.transport import safesh
from ..errors import UserError
from ..results.model import RunResult
from ..results.store import rawfile
from ..results.store.runstore import Store
from . import lifecycle
from .engines import ProgressReader
from .lifecycle import FINAL_STATES, runner_text

BASE_DIR = safesh.BOARD_DIR
# Everything a run's raw/ may hold (results/store/rawfile.py's bounds, the series and telemetry at most):
# more is not a run
MAX_FETCH_BYTES = 12 << 30
PROGRESS_FILES = {"probe": "series.jsonl", "cyclictest": "cyclictest.out", "nqueens": "steps.log"}
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_run_id(run_id: str) -> str:
    """Run ids become paths and unit names on the target: only safe characters."""
    if not _RUN_ID_RE.match(run_id) or ".." in run_id:
        shown = run_id if run_id.isprintable() and len(run_id) < 80 else ascii(run_id[:80])
        raise UserError(f"'{shown}' is not a run id: ids look like 20261122-145400-raspberrypi-1a2b")
    return run_id


@dataclass
class RunInfo:
    run_id: str
    alive: bool
    state: str          # the first word of the state file
    detail: str = ""    # the rest of it: why it failed, which signal

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def script_argv(command: str, base: str, *args: str) -> list[str]:
    """The runner's BASE-wide commands (busy, list), run without its file."""
    return ["sh", "-c", runner_text(), "runner", command, base, *args]


def as_root(argv: list[str]) -> list[str]:
    """argv run as root whoever the login is (sudo -n when it is not root), for
    a command sent before rtforge knows the login: a board's folder is root's."""
    return ["sh", "-c", '[ "$(id -u)" = 0 ] && exec "$@"; exec sudo -n -- "$@"', "sh", *argv]


def _checked(transport: Transport, r, step: str):
    """r, or the one sentence a refused folder (data/safe.sh) or a failure says."""
    err = safesh.owned_error(r, f"on {transport.name}" if transport.name != "this machine" else "here")
    if err:
        raise err
    if r.returncode:
        detail = (r.stderr or "").strip().splitlines()[-1:] or [f"exit status {r.returncode}"]
        raise UserError(f"{step} failed on {transport.name}: {detail[0]}")
    return r


def _script(transport: Transport, command: str, base: str, step: str) -> str:
    # a board's folder is root's (0700): a login that is not root reads it through sudo
    r = transport.run(script_argv(command, base), sudo=not isinstance(transport, LocalTransport), step=step)
    return _checked(transport, r, step).stdout


def list_runs(transport: Transport, base: str = BASE_DIR) -> list[RunInfo]:
    """Every run directory with a runner on the target, with its liveness."""
    runs = []
    for line in _script(transport, "list", base, "listing the runs on the target").splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3:
            runs.append(RunInfo(parts[0], parts[1] == "1", parts[2], parts[3] if len(parts) > 3 else ""))
    return sorted(runs, key=lambda r: r.run_id)


def busy_with(transport: Transport, base: str = BASE_DIR) -> str | None:
    """The id of the run measuring on the target now, if any."""
    return _script(transport, "busy", base, "checking whether the target is measuring").strip() or None


def resolve_run(transport: Transport, ref: str, base: str = BASE_DIR) -> str:
    """A run id or a unique prefix of one, among the runs on the target."""
    runs = [r.run_id for r in list_runs(transport, base)]
    if ref in runs:
        return ref
    matches = [r for r in runs if r.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    shown = ref if ref.isprintable() and len(ref) < 80 else ascii(ref[:80])
    if not matches:
        listed = f": it has {', '.join(runs)}" if runs else ": it has none"
        raise UserError(f"no run '{shown}' on {transport.name}{listed}")
    raise UserError(f"'{shown}' matches {len(matches)} runs on {transport.name} ({', '.join(matches[:3])}); "
                    "give more of the id")


@dataclass
class Poll:
    """What one poll of the target said."""
    state: str
    detail: str
    alive: bool
    elapsed_s: float | None
    max_ns: dict[int, int] = field(default_factory=dict)
    steps: int = 0

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


class NothingMeasured(UserError):
    """The run ended before the engine wrote anything."""


class Runner:
    """Handle on BASE/runs/<run_id> behind `transport`.  Writes (stop, reap,
    remove) go through sudo when a board's login is not root; on this
    machine nothing does (the run is the user's own)."""

    def __init__(self, transport: Transport, run_id: str, *, base: str = BASE_DIR, sudo: bool | None = None,
                 doc: dict | None = None):
        self.t = transport
        self.run_id = check_run_id(run_id)
        self.base = base
        self.dir = f"{base}/runs/{run_id}"
        local = isinstance(transport, LocalTransport)
        self.sudo = False if local else (not transport.is_root()) if sudo is None else sudo
        self._doc: dict | None = doc  # the run's description, when the caller has it
        self._progress: ProgressReader | None = None

    def _runner(self, command: str, *args: str, step: str, timeout: float | None = 120):
        # rtforge's own runner, here and on a board: a runner.sh found in a run
        # folder is data (a store may come from anywhere, a board be shared),
        # never code rtforge runs.  A board's folder is root's: read through sudo too.
        argv = lifecycle.packaged_runner(command, self.dir, *args)
        r = self.t.run(argv, sudo=self.sudo, timeout=timeout, step=step)
        err = safesh.owned_error(r, f"on {self.t.name}" if not isinstance(self.t, LocalTransport) else "here")
        if err:
            raise err
        return r

    def read_json(self) -> dict:
        """The run as rtforge described it when it started."""
        if self._doc is None:
            try:
                self._doc = json.loads(self.t.read_text(f"{self.dir}/raw/runner/run.json", sudo=self.sudo,
                                                        step="reading the run's description"))
            except ConnectionLost:
                raise
            except (UserError, json.JSONDecodeError):
                raise UserError(f"run {self.run_id} on {self.t.name} has no readable run.json: it was not started "
                                "by this rtforge, or its directory is damaged") from None
        return self._doc

    # -- following a run -------------------------------------------------
    def poll(self, progress: bool = True) -> Poll:
        """One cheap round trip: state, liveness and (unless progress=False)
        the engine's progress added since the last poll."""
        if self._progress is None and progress:
            doc = self.read_json()
            self._progress = ProgressReader(doc["engine"], (doc.get("config") or {}).get("cpus") or [])
        pr = self._progress if progress and self._progress is not None else ProgressReader("", [])
        r = self._runner("status", str(pr.consumed), PROGRESS_FILES.get(pr.engine, ""),
                         step="reading the run's progress", timeout=60)
        if r.returncode:
            if "No such file" in r.stderr:
                raise UserError(f"run {self.run_id} is not on {self.t.name} (any more): "
                                f"`rtforge fetch {self.t.name}` lists what is there")
            # e.g. the board's sshd session died under the command (SIGHUP)
            raise ConnectionLost(f"the target's answer was cut off (status {r.returncode})")
        head, _, said = r.stdout.partition("@@progress\n")
        fields = dict(line.split(" ", 1) for line in head.splitlines() if " " in line)
        word, _, detail = fields.get("state", "missing").partition(" ")
        pr.feed(said.encode())
        elapsed = None
        try:
            elapsed = max(0.0, float(fields["uptime"]) - float(fields["started"]))
        except (KeyError, ValueError):
            pass
        return Poll(word, detail, fields.get("alive") == "1", elapsed, dict(pr.max_ns), pr.steps)

    def stop(self, signal_name: str = "TERM") -> bool:
        """Ask the runner to end the run cleanly; False when it is not running."""
        r = self._runner("stop", signal_name, step="stopping the run")
        return r.stdout.strip() == "signalled"

    def reap(self) -> None:
        """After the runner died: stop the engine cleanly and the loads as
        groups, and mark the run killed (no-op for a finished run)."""
        self._runner("reap", step="cleaning up after the killed run", timeout=120)

    def remove(self) -> None:
        self.t.run(["rm", "-rf", "--", self.dir], sudo=self.sudo, check=True, step="removing the run from the target")

    # -- into the store ------------------------------------------------------
    def in_store(self, store: Store) -> bool:
        """Whether this run's directory is its folder in `store` (a run of this machine)."""
        return isinstance(self.t, LocalTransport) and Path(self.dir) == store.run_dir(self.run_id).resolve()

    def finish(self, store: Store, keep_empty: bool = False) -> RunResult:
        """A run of this machine, ended: finish it in its store folder.  One
        that measured nothing is forgotten -- unless keep_empty (it was
        interrupted while its loads were starting: the user asked to keep
        what there is, and its metadata is what there is)."""
        d = Path(self.dir)
        result = store.load(self.run_id)
        try:
            _finish(result, d, f"run {self.run_id}")
        except NothingMeasured as e:
            if not keep_empty:
                store.delete(self.run_id)
                raise NothingMeasured(f"{e}{_tail_note(self.t, self.dir, self.sudo)}") from None
            result.state, result.owner, result.cpus = "interrupted", None, []
            result.end_reason = "interrupted before measuring began (the loads were starting)"
            result.warnings = [f"{result.end_reason}: nothing was measured, the run's settings and system are kept"]
        lifecycle.remove_inputs(d)
        store.save(result)
        return result

    def fetch(self, store: Store) -> RunResult:
        """Copy a board's run into the store, verified file by file; the
        board's copy is left alone (remove() it once this returned)."""
        manifest = self._runner("manifest", step="checksumming the run on the target").stdout
        sums = {}
        for line in manifest.splitlines():
            digest, _, name = line.partition("  ")
            if name.startswith("raw/"):
                sums[name] = digest
        tmp = store.runs_dir / f".fetch-{self.run_id}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            # streamed to disk with a bound: a board's answer is not trusted to be as small as a run
            self.t.run_to_file(["tar", "-C", self.dir, "-cf", "-", "--", *sums], tmp / ".tar", limit=MAX_FETCH_BYTES,
                               sudo=self.sudo, step="fetching the run")
            _unpack(tmp / ".tar", tmp, sums)
            (tmp / ".tar").unlink()
            result = RunResult.from_dict(json.loads((tmp / "raw" / "runner" / "run.json").read_text()))
            if result.run_id != self.run_id:  # a board's word names no other stored run
                raise UserError(f"run {self.run_id} on {self.t.name} calls itself {result.run_id!r} in its "
                                "run.json: it was not started by this rtforge as that run; nothing was stored")
            try:
                _finish(result, tmp, f"run {self.run_id} on {self.t.name}")
            except NothingMeasured as e:
                raise NothingMeasured(f"{e}{_tail_note(self.t, self.dir, self.sudo)}") from None
            final = store.run_dir(self.run_id)
            if final.exists():
                shutil.rmtree(final)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        store.save(result)
        return result


def _finish(result: RunResult, d: Path, what: str) -> None:
    """lifecycle.finish, or NothingMeasured when the engine left nothing to read."""
    try:
        lifecycle.finish(result, d)
    except UserError as e:
        raise NothingMeasured(f"{what} measured nothing ({_state_line(d)}; {e})") from None
    if result.kind != "bench" and not result.cpus:
        raise NothingMeasured(f"{what} measured nothing ({_state_line(d)})")


def _state_line(d: Path) -> str:
    word, detail = lifecycle.runner_state(d)
    return f"{word} {detail}".strip() if word else "no state"


def _tail_note(t: Transport, d: str, sudo: bool = False) -> str:
    r = t.run(["sh", "-c", 'tail -n 2 "$1"/raw/*.out "$1/raw/runner/runner.log" 2>/dev/null | grep -v "^==" | grep .',
               "sh", d], sudo=sudo)
    lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
    return f": {'; '.join(lines[-2:])}" if lines else ""


def _unpack(archive: Path, dest: Path, sums: dict[str, str]) -> None:
    """raw/... into dest/raw/..., each file checked against the target's sha256."""
    root = (dest / "raw").resolve()
    root.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}
        for name, digest in sums.items():
            m = members.get(name)
            if m is None:
                raise UserError(f"{name} was missing from what the target sent: fetch again")
            target = (dest / name).resolve()
            if root not in target.parents or ".." in Path(name).parts:
                raise UserError(f"the target sent an unexpected file name {name!r}; nothing was stored")
            if m.size > rawfile.limit_for(name):
                raise UserError(f"{name} from the target is {m.size >> 20:,} MiB, more than a run writes; "
                                "nothing was stored")
            target.parent.mkdir(parents=True, exist_ok=True)
            h = hashlib.sha256()
            src = tar.extractfile(m)
            assert src is not None
            # copied in pieces: a day-long series is gigabytes
            with src, os.fdopen(paths.create_new(target), "wb") as out:
                while chunk := src.read(1 << 20):
                    h.update(chunk)
                    out.write(chunk)
            if h.hexdigest() != digest:
                raise UserError(f"{name} arrived damaged (its sha256 differs from the target's): fetch again; "
                                "the target's copy is kept")
