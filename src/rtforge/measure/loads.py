"""Background loads: named profiles (data/loads.toml) started as process
groups and stopped as process groups."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .. import procfs
from ..errors import UserError
from ..target import Transport
from .spec import parse_load_names

SETTLE_S = 1.0      # time to let loads fork their workers before measuring
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL
DEADLINE_MARGIN_S = 60


@dataclass(frozen=True)
class LoadProfile:
    name: str
    description: str
    argv: tuple[str, ...]
    package: str
    instances: int | str = 1
    restart: bool = False
    needs_root: bool = False
    tmpdir: bool = False


def load_profiles() -> dict[str, LoadProfile]:
    doc = tomllib.loads((resources.files("rtforge.data") / "loads.toml").read_text())
    return {name: LoadProfile(name=name, **{**fields, "argv": tuple(fields["argv"])}) for name, fields in doc.items()}


def parse_loads(text: str | None) -> list[str]:
    return parse_load_names(text, list(load_profiles()))


def deadline_for(expected_s: float | None) -> int:
    """A load's own time limit: the run plus a margin (a week when unbounded)."""
    return int(expected_s + DEADLINE_MARGIN_S) if expected_s else 7 * 86400


@dataclass
class _Proc:
    profile: LoadProfile
    argv: list[str]
    popen: object
    pgid: int


class LoadSet:
    """The loads of one run.  start() before measuring, stop() in a finally."""

    def __init__(self, names: list[str], transport: Transport, *, ncpus: int, deadline_s: int,
                 net_target: str = "127.0.0.1"):
        profiles = load_profiles()
        self.profiles = [profiles[n] for n in names]
        self.transport = transport
        self.ncpus = ncpus
        self.deadline_s = deadline_s
        self.net_target = net_target
        self.procs: list[_Proc] = []
        self.pgids_started: list[int] = []  # every group ever started, for checks
        self.tmpdirs: list[str] = []
        self.events: list[str] = []
        self.log: Path | None = None

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.profiles]

    def check(self) -> None:
        """Every tool present and privileges sufficient, before anything starts."""
        for p in self.profiles:
            if not self.transport.which(p.argv[0]):
                raise UserError(f"the '{p.name}' load needs {p.argv[0]}, which is not installed: apt install {p.package}")
            if p.needs_root and not self.transport.is_root():
                raise UserError(f"the '{p.name}' load ({p.argv[0]}) needs root: run rtforge as root or drop '{p.name}'")

    def _argv(self, p: LoadProfile, tmpdir: str | None) -> list[str]:
        values = {"ncpus": self.ncpus, "deadline_s": self.deadline_s, "tmpdir": tmpdir, "net_target": self.net_target}
        return [a.format(**values) for a in p.argv]

    def _spawn(self, p: LoadProfile, argv: list[str]) -> None:
        popen = self.transport.spawn(argv, log=self.log, errors_only=True)
        self.procs.append(_Proc(p, argv, popen, popen.pid))  # session leader: pgid == pid
        self.pgids_started.append(popen.pid)

    def start(self, log: Path | None = None) -> None:
        self.log = log
        for p in self.profiles:
            tmpdir = tempfile.mkdtemp(prefix=f"rtforge-{p.name}-") if p.tmpdir else None
            if tmpdir:
                self.tmpdirs.append(tmpdir)
            n = self.ncpus if p.instances == "ncpus" else int(p.instances)
            for _ in range(n):
                self._spawn(p, self._argv(p, tmpdir))
        if not self.procs:
            return
        time.sleep(SETTLE_S)
        for proc in self.procs:
            rc = proc.popen.poll()
            if rc is not None and not proc.profile.restart:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log and log.exists() else []
                self.stop()
                raise UserError(
                    f"the '{proc.profile.name}' load exited at once with status {rc}"
                    f"{': ' + tail[0] if tail else ''}; try `{' '.join(proc.argv)}` by hand"
                )

    def poll(self, elapsed_s: float) -> None:
        """Restart loads that are meant to run in rounds; note any that died."""
        for proc in list(self.procs):
            rc = proc.popen.poll()
            if rc is None:
                continue
            if proc.profile.restart:
                self.procs.remove(proc)
                self._spawn(proc.profile, proc.argv)
            elif not any(e.startswith(proc.profile.name + " ") for e in self.events):
                self.events.append(f"{proc.profile.name} load ended early (status {rc}) after {elapsed_s:.0f} s")

    def stop(self) -> None:
        """Kill every process group; idempotent; never raises for a group already gone."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in self.procs:
                try:
                    os.killpg(proc.pgid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and any(group_alive(p.pgid) for p in self.procs):
                for proc in self.procs:
                    proc.popen.poll()  # reap the leaders
                time.sleep(0.05)
            if not any(group_alive(p.pgid) for p in self.procs):
                break
        for proc in self.procs:
            proc.popen.wait()
        self.procs.clear()
        for d in self.tmpdirs:
            shutil.rmtree(d, ignore_errors=True)
        self.tmpdirs.clear()


def group_alive(pgid: int) -> bool:
    """Whether any process (zombies aside) is still in process group pgid."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(procfs.group_members(pgid))
