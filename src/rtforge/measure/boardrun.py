"""One latency run's directory on a board, seen from the host.

The board side is ``data/runner.sh`` (its header documents the files and
states); this module speaks its protocol through a Transport: poll the
state and the new lines of the per-second series, stop the run, end what a
killed runner left behind, and bring the run into the local store -- every
file checked against the board's own sha256 before the board's copy is
removed.  Nothing here needs the connection to stay up between calls: a
handle is just the run id, so `attach` and `fetch` build one from scratch.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tarfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import UserError
from ..results.collect import finalize
from ..results.model import RunResult
from ..results.store import Store
from ..target import ConnectionLost, Transport

BASE_DIR = "/var/tmp/rtforge"
FINAL_STATES = ("done", "interrupted", "killed", "failed")
SERIES_CHUNK_MAX = 1 << 20  # a poll never carries more than this much series (bytes)
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def runner_text() -> str:
    return (resources.files("rtforge.data") / "runner.sh").read_text()


def check_run_id(run_id: str) -> str:
    """Run ids become paths and unit names on the board: only safe characters."""
    if not _RUN_ID_RE.match(run_id) or ".." in run_id:
        raise UserError(f"'{run_id}' is not a run id: ids look like 20261122-145400-raspberrypi-1a2b")
    return run_id


@dataclass
class BoardRunInfo:
    run_id: str
    alive: bool
    state: str          # the first word of the state file
    detail: str = ""    # the rest of it: why it failed, which signal

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def list_runs(transport: Transport, base: str = BASE_DIR) -> list[BoardRunInfo]:
    """Every run directory on the board, with its runner's liveness."""
    out = transport.run(["sh", "-c", runner_text(), "runner", "list", base], check=True,
                        step="listing the runs on the board").stdout
    runs = []
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3:
            runs.append(BoardRunInfo(parts[0], parts[1] == "1", parts[2], parts[3] if len(parts) > 3 else ""))
    return sorted(runs, key=lambda r: r.run_id)


def busy_with(transport: Transport, base: str = BASE_DIR) -> str | None:
    """The id of the run measuring on the board now, if any."""
    out = transport.run(["sh", "-c", runner_text(), "runner", "busy", base], check=True,
                        step="checking whether the board is measuring").stdout.strip()
    return out or None


def resolve_run(transport: Transport, ref: str, base: str = BASE_DIR) -> str:
    """A run id or a unique prefix of one, among the runs on the board."""
    runs = [r.run_id for r in list_runs(transport, base)]
    if ref in runs:
        return ref
    matches = [r for r in runs if r.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        listed = f": it has {', '.join(runs)}" if runs else ": it has none"
        raise UserError(f"no run '{ref}' on {transport.name}{listed}")
    raise UserError(f"'{ref}' matches {len(matches)} runs on {transport.name} ({', '.join(matches[:3])}); "
                    "give more of the id")


@dataclass
class Poll:
    """What one poll of the board said."""
    state: str
    detail: str
    alive: bool
    elapsed_s: float | None
    max_ns: dict[int, int] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


class BoardRun:
    """Handle on BASE/runs/<run_id> on the board behind `transport`.  Writes
    (stop, reap, remove) go through sudo when the login is not root."""

    def __init__(self, transport: Transport, run_id: str, *, sudo: bool | None = None, base: str = BASE_DIR):
        self.t = transport
        self.run_id = check_run_id(run_id)
        self.base = base
        self.dir = f"{base}/runs/{run_id}"
        self.sudo = (not transport.is_root()) if sudo is None else sudo
        # progress state, kept between polls
        self._offset = 0
        self._cpus: list[int] | None = None
        self._max: dict[int, int] = {}

    def _runner(self, command: str, *args: str, write: bool = False, step: str, timeout: float | None = 120):
        return self.t.run(["sh", f"{self.dir}/runner.sh", command, self.dir, *args], sudo=write and self.sudo,
                          timeout=timeout, step=step)

    # -- following a run -------------------------------------------------
    def poll(self) -> Poll:
        """One cheap round trip: state, liveness and the series lines added
        since the last poll (the first poll also reads probe.json's head
        for the CPU list)."""
        want_head = "1" if self._cpus is None else "0"
        r = self._runner("status", str(self._offset), want_head, step="reading the run's progress", timeout=60)
        if r.returncode:
            if "No such file" in r.stderr:
                raise UserError(f"run {self.run_id} is not on {self.t.name} (any more): "
                                f"`rtforge fetch {self.t.name}` lists what is there")
            # e.g. the board's sshd session died under the command (SIGHUP)
            raise ConnectionLost(f"the board's answer was cut off (status {r.returncode})")
        head, _, series = r.stdout.partition("@@series\n")
        head, _, probe_head = head.partition("@@head\n")
        fields = dict(line.split(" ", 1) for line in head.splitlines() if " " in line)
        word, _, detail = fields.get("state", "missing").partition(" ")
        if probe_head and self._cpus is None:
            m = re.search(r'"cpus":\[([0-9,]*)\]', probe_head)
            if m:
                self._cpus = [int(c) for c in m.group(1).split(",") if c]
        if self._cpus is not None:
            self._fold(series.encode())
        elapsed = None
        try:
            elapsed = max(0.0, float(fields["uptime"]) - float(fields["started"]))
        except (KeyError, ValueError):
            pass
        return Poll(word, detail, fields.get("alive") == "1", elapsed, dict(self._max))

    def _fold(self, chunk: bytes) -> None:
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(whole)
        for line in whole.splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            for cpu, m in zip(self._cpus or [], row.get("max_ns") or []):
                if m is not None and m > self._max.get(cpu, -1):
                    self._max[cpu] = m

    def stop(self, signal_name: str = "TERM") -> bool:
        """Ask the runner to end the run cleanly; False when it is not running."""
        r = self._runner("stop", signal_name, write=True, step="stopping the run")
        return r.stdout.strip() == "signalled"

    def reap(self) -> None:
        """After the runner died: stop the probe cleanly and the loads as
        groups, and mark the run killed (no-op for a finished run)."""
        self._runner("reap", write=True, step="cleaning up after the killed run", timeout=120)

    def read_json(self) -> dict:
        try:
            return json.loads(self.t.read_text(f"{self.dir}/run.json", step="reading the run's description"))
        except (UserError, json.JSONDecodeError):
            raise UserError(f"run {self.run_id} on {self.t.name} has no readable run.json: it was not started "
                            "by rtforge, or its directory is damaged") from None

    def remove(self) -> None:
        self.t.run(["rm", "-rf", "--", self.dir], sudo=self.sudo, check=True, step="removing the run from the board")

    # -- into the local store ------------------------------------------
    def fetch(self, store: Store) -> RunResult:
        """Copy the run into the store, verified file by file; the board's
        copy is left alone (remove() it once this returned)."""
        manifest = self._runner("manifest", step="checksumming the run on the board").stdout
        sums = {}
        for line in manifest.splitlines():
            digest, _, name = line.partition("  ")
            if name:
                sums[name] = digest
        if "raw/probe.json" not in sums:
            state_line = self.t.run(["cat", "--", f"{self.dir}/state"]).stdout.strip()
            raise NothingMeasured(f"run {self.run_id} on {self.t.name} measured nothing ({state_line or 'no state'})"
                                  + _tail_note(self.t, self.dir))
        data = self.t.run_bytes(["tar", "-C", self.dir, "-cf", "-", "--", *sums], step="fetching the run")
        tmp = store.runs_dir / f".fetch-{self.run_id}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _unpack(data, tmp / "raw", sums)
            doc = json.loads((tmp / "raw" / "runner" / "run.json").read_text())
            state_file = tmp / "raw" / "runner" / "state"
            word, _, detail = (state_file.read_text().strip() if state_file.exists() else "").partition(" ")
            result = RunResult.from_dict(doc)
            state = {"interrupted": "interrupted", "killed": "killed", "failed": "failed"}.get(word)
            finalize(result, tmp, state=state, end_reason=detail or None)
            if result.config.get("cpus") is None:
                result.config["cpus"] = [c.cpu for c in result.cpus]
            events = (tmp / "raw" / "runner" / "events")
            for note in events.read_text().splitlines() if events.exists() else []:
                result.warnings.append(f"{note} on the board: see raw/loads.log of this run for why")
            final = store.run_dir(self.run_id)
            if final.exists():
                shutil.rmtree(final)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        store.save(result)
        return result


class NothingMeasured(UserError):
    """The run ended before the probe wrote anything."""


def _tail_note(t: Transport, d: str) -> str:
    r = t.run(["sh", "-c", 'tail -n 2 "$1/raw/probe.out" "$1/runner.log" 2>/dev/null | grep -v "^==" | grep .',
               "sh", d])
    lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
    return f": {'; '.join(lines[-2:])}" if lines else ""


def _unpack(data: bytes, raw: Path, sums: dict[str, str]) -> None:
    """The probe's files into raw/, the runner's bookkeeping into raw/runner/,
    each checked against the board's sha256."""
    (raw / "runner").mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}
        for name, digest in sums.items():
            m = members.get(name)
            if m is None:
                raise UserError(f"{name} was missing from what the board sent: fetch again")
            content = tar.extractfile(m).read()
            if hashlib.sha256(content).hexdigest() != digest:
                raise UserError(f"{name} arrived damaged (its sha256 differs from the board's): fetch again; "
                                "the board's copy is kept")
            dest = raw / name.removeprefix("raw/") if name.startswith("raw/") else raw / "runner" / name
            if dest.resolve().parent not in (raw.resolve(), (raw / "runner").resolve()):
                raise UserError(f"the board sent an unexpected file name {name!r}; nothing was stored")
            dest.write_bytes(content)
