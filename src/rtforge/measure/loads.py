"""Background loads: named profiles (data/loads.toml), rendered into the
command lines the runner (data/runner.sh) starts on the target -- this
machine or a board, the same way -- each in its own session, stopped as a
process group after the engine on every exit path.

Only one load runs outside the runner: a board's `net` load floods the
board *from this host* (HostFlood), for as long as rtforge follows the run.
"""

from __future__ import annotations

import os
import shlex
import signal
import time
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from .. import procfs
from ..device import LocalTransport, Transport
from ..errors import UserError
from .spec import parse_load_names

STOP_GRACE_S = 5.0      # SIGTERM, then SIGKILL (the runner's STOP_TENTHS too)
DEADLINE_MARGIN_S = 60
HOST_LOADS = ("net",)   # on a board run: started on this host, aimed at the board


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


@cache
def _profiles_text() -> str:
    return (resources.files("rtforge.data") / "loads.toml").read_text()


def load_profiles() -> dict[str, LoadProfile]:
    doc = tomllib.loads(_profiles_text())
    return {name: LoadProfile(name=name, **{**fields, "argv": tuple(fields["argv"])}) for name, fields in doc.items()}


def parse_loads(text: str | None) -> list[str]:
    return parse_load_names(text, list(load_profiles()))


def deadline_for(expected_s: float | None, settle_s: float = 0) -> int:
    """A load's own time limit: the run plus a margin (a week when unbounded),
    so that not even a killed runner leaves a load going for long."""
    return int(settle_s + expected_s + DEADLINE_MARGIN_S) if expected_s else 7 * 86400


def tools_needed(names: list[str]) -> dict[str, tuple[str, str]]:
    """argv[0] -> (Debian package, load name) of the given loads."""
    profiles = load_profiles()
    return {profiles[n].argv[0]: (profiles[n].package, n) for n in names}


def load_commands(names: list[str], *, ncpus: int, deadline_s: int, tmpdir: str,
                  net_target: str = "127.0.0.1") -> list[tuple[str, str]]:
    """(file name, quoted command line) per load process, for the runner."""
    profiles = load_profiles()
    out: list[tuple[str, str]] = []
    for name in names:
        p = profiles[name]
        values = {"ncpus": ncpus, "deadline_s": deadline_s, "tmpdir": tmpdir, "net_target": net_target}
        argv = [a.format(**values) for a in p.argv]
        if p.restart:
            # runs in rounds until the deadline; a failing round is not a busy loop
            argv = ["timeout", str(deadline_s), "sh", "-c", 'while :; do "$@" || sleep 1; done', "sh", *argv]
        for _ in range(ncpus if p.instances == "ncpus" else int(p.instances)):
            out.append((f"{len(out) + 1:02d}-{name}", shlex.join(argv)))
    return out


def check_privileges(names: list[str], transport: Transport, where: str = "") -> None:
    for n in names:
        p = load_profiles()[n]
        if p.needs_root and not transport.is_root():
            raise UserError(f"the '{n}' load ({p.argv[0]}) needs root{' ' + where if where else ''}: "
                            f"run rtforge as root or drop '{n}'")


class HostFlood:
    """A board run's `net` load: ping -f from this host to the board, in its
    own process group, stopped as a group; it also dies with rtforge
    (PR_SET_PDEATHSIG) and at its own deadline."""

    def __init__(self, address: str, remaining_s: float | None):
        self.profile = load_profiles()["net"]
        values = {"ncpus": 1, "deadline_s": deadline_for(remaining_s), "tmpdir": "", "net_target": address}
        self.argv = [a.format(**values) for a in self.profile.argv]
        self.transport = LocalTransport()
        self.popen = None
        self.events: list[str] = []

    def check(self) -> None:
        if not self.transport.which(self.argv[0]):
            raise UserError(f"the 'net' load needs {self.argv[0]} on this machine, which is not installed: "
                            f"apt install {self.profile.package}")
        check_privileges(["net"], self.transport, "on this machine (it floods the board from here)")

    def start(self) -> None:
        self.popen = self.transport.spawn(self.argv, errors_only=True)

    def poll(self, elapsed_s: float) -> None:
        rc = self.popen.poll() if self.popen else None
        if rc is not None and not self.events:
            self.events.append(f"net load (ping -f from this host) ended early (status {rc}) after {elapsed_s:.0f} s")

    def stop(self) -> None:
        """Kill the group; idempotent; never raises for a group already gone."""
        if self.popen is None:
            return
        pgid = self.popen.pid  # session leader: pgid == pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and group_alive(pgid):
                self.popen.poll()
                time.sleep(0.05)
            if not group_alive(pgid):
                break
        self.popen.wait()
        self.popen = None


def group_alive(pgid: int) -> bool:
    """Whether any process (zombies aside) is still in process group pgid."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(procfs.group_members(pgid))
