"""`rtforge monitor run [HOST]`: the service's measurement in the
foreground -- the same probe command line, with --echo so each window
comes back over the pipe (or the SSH session) as it closes.

Ctrl-C (or SIGTERM) ends it the way systemd ends the service: the probe
gets SIGTERM, closes its last window (partial), files its hour and day and
records its stop; everything measured stays in the monitor's folder.  On a
board the probe runs under a small shell wrapper that sends it SIGTERM when
the SSH session's input ends, so a dropped link or a killed rtforge ends
the run cleanly too, instead of leaving a probe that nobody reads.
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from ..device import LocalTransport, Transport
from ..errors import UserError
from ..measure.probebuild import build_probe
from ..measure.runner import BASE_DIR, busy_with
from ..results.schema import Damaged
from ..results.soak.windows import Window, parse_window
from ..signals import deferred_signals, held_signals
from . import board
from .service import UNIT
from .spec import MonitorSpec

# "$@" is the probe's command line; fd 3 keeps the session's input, whose end
# (the host let go) stops the probe cleanly.
_WRAP = r"""
exec 3<&0
"$@" </dev/null &
p=$!
( read -r _ <&3; kill -TERM "$p" 2>/dev/null ) &
w=$!
wait "$p"
s=$?
kill "$w" 2>/dev/null
exit "$s"
"""


@dataclass
class Live:
    host: str                 # the board's name (uname -n)
    state_dir: str
    windows: list[Window] = field(default_factory=list)
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)


def _die_with_parent() -> None:  # between fork and exec: no probe (or ssh) outlives rtforge
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def prepare(transport: Transport, spec: MonitorSpec, *, on_step=lambda s: None) -> tuple[list[str], Live]:
    """Every check before the probe starts; its command line and the run's record."""
    local = isinstance(transport, LocalTransport)
    on_step("checking this machine" if local else f"connecting to {transport.name}")
    f = board.facts(transport)
    if f.systemd and f.systemctl and transport.run(["systemctl", "is-active", "--quiet", UNIT]).returncode == 0:
        at = "" if local else f" {transport.name}"
        raise UserError(f"{UNIT} is running {board.where(transport)} and measures already: "
                        f"`rtforge monitor status{at}` shows it, `rtforge monitor stop{at}` ends it")
    if not local:
        owner = busy_with(transport, BASE_DIR)
        if owner:
            raise UserError(f"{transport.name} is measuring (run {owner}); a monitor beside it would spoil both")
    if spec.textfile_dir and transport.run(["test", "-d", spec.textfile_dir]).returncode:
        raise UserError(f"--textfile-dir {spec.textfile_dir} is not a folder {board.where(transport)}: create it first")
    if local:
        program = str(build_probe())
        r = transport.run([program, "--check", "--priority", str(spec.priority)])
        if r.returncode == 3:
            raise UserError(f"{r.stderr.strip().removeprefix('rtprobe: ')} here: {board.PRIVILEGE_HINT}")
    else:
        program = board.install_probe(transport, f, on_step)
        board.check_privileges(transport, spec)
    live = Live(f.hostname, spec.state_dir)
    note = board.choose_rtla(transport, f, spec)
    if note:
        live.notes.append(note)
    return spec.argv(program, echo=True), live


def run(transport: Transport, spec: MonitorSpec, *, on_window: Callable[[Window], None] = lambda w: None,
        on_step=lambda s: None, on_start: Callable[[Live], None] = lambda live: None,
        on_event: Callable[[dict], None] = lambda e: None) -> Live:
    """Measure until --for ends or Ctrl-C; on_start once the probe has its
    folder and measures, on_event for each gap, kernel change, alert, ..."""
    argv, live = prepare(transport, spec, on_step=on_step)
    local = isinstance(transport, LocalTransport)
    if not local:
        sudo = [] if transport.is_root() else ["sudo", "-n", "--"]
        argv = transport.local_argv([*sudo, "sh", "-c", _WRAP, "sh", *argv])
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True, preexec_fn=_die_with_parent)
        events = _Events(live, on_start, on_event)
        try:
            _read(proc, live, on_window, events)
        except KeyboardInterrupt:
            live.interrupted = True
            with held_signals():
                if local:
                    proc.send_signal(signal.SIGTERM)
                elif proc.stdin is not None:
                    proc.stdin.close()  # the wrapper stops the probe, which sends its last window
                _read(proc, live, on_window, events)
        finally:
            with held_signals():
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        err.seek(0)
        message = err.read().decode(errors="replace").strip()
    _check_exit(proc.returncode, message, transport, live)
    return live


class _Events:
    """The probe's events as they come: the first (its start) means it measures."""

    def __init__(self, live: Live, on_start, on_event):
        self.live, self.on_start, self.on_event, self.started = live, on_start, on_event, False

    def __call__(self, e: dict) -> None:
        if e.get("event") == "start" and not self.started:
            self.started = True
            self.on_start(self.live)
        else:
            self.on_event(e)


def _read(proc: subprocess.Popen, live: Live, on_window, on_event) -> None:
    assert proc.stdout is not None   # started with stdout=PIPE
    for line in proc.stdout:
        try:
            doc = json.loads(line)
            if isinstance(doc, dict) and isinstance(doc.get("event"), str):
                on_event(doc)
                continue
            w = parse_window(doc)
        except (ValueError, Damaged):
            continue  # neither: the probe prints nothing else there
        with deferred_signals():  # a Ctrl-C now acts after the window is kept and shown, once
            live.windows.append(w)
            on_window(w)


def _check_exit(code: int, message: str, transport: Transport, live: Live) -> None:
    last = message.splitlines()[-1].removeprefix("rtprobe: ") if message else f"exit status {code}"
    if code in (0, -signal.SIGTERM) or (live.interrupted and code in (130, 143, 255)):
        return
    if code == 3:
        raise UserError(f"{last} {board.where(transport)}: {board.PRIVILEGE_HINT}")
    if code == 4:
        raise UserError(f"{last}: one monitor per folder; `rtforge monitor status` shows it")
    if live.windows and code == 255:  # the link dropped; the board's wrapper has stopped the probe
        raise UserError(f"the connection to {transport.name} dropped ({last}); the probe stopped there with "
                        f"{len(live.windows)} windows kept in {live.state_dir}: `rtforge monitor fetch` brings them")
    raise UserError(f"the monitor stopped {board.where(transport)}: {last}")
