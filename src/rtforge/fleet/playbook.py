"""Running one of the collection's playbooks and reading what it says.

ansible-playbook runs with the collection on ANSIBLE_COLLECTIONS_PATH and
its events callback as the standard output: one JSON object per line per
host and task, read as they come (the per-board progress).  Its standard
error and Ansible's log go to the campaign's folder.  The hosts are given
as a limit file (`--limit @FILE`, Ansible's retry-file form): the boards
this run must still do, however the user's own --limit named them.

It runs (when rtforge fleet asks: `serve`) under rtforge's fork server
(cli/forkserver.py: each board's rtforge is forked from one that imported
it once), in a session of its own, so a
Ctrl-C at the terminal reaches rtforge fleet alone; rtforge then passes it
on to the whole play at once (every rtforge under it lets go of its
board's run, which goes on there), reads the last events for a while, and
ends what is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from .. import paths
from ..signals import deferred_signals
from .inventory import ansible_env

COLLECTIONS = Path(str(resources.files("rtforge") / "ansible"))
INTERRUPT_GRACE_S = 30.0   # rtforge lets go of a board within seconds; a start being undone needs a connect timeout


class Interrupted(KeyboardInterrupt):
    """Ctrl-C reached the play; the events up to its end were read."""


def playbook_argv(name: str, inventory: str, folder: Path, extra_vars: dict, hosts: list[str],
                  forks: int) -> list[str]:
    """ansible-playbook's command line; the variables and the limit go into files of the campaign's folder.

    --skip-tags always: the roles' argument validation (meta/argument_specs.yml, a task Ansible tags
    `always`, the only one so tagged in the collection) is for plays people write.  rtforge fleet has checked
    every board's variables already, with rtforge's own rules and in one sentence naming board and variable;
    Ansible's check again is a task per board and role, ~45 ms of the controller's CPU per board (measured on
    32 boards), spent while the boards are started."""
    paths.write_atomic(folder / "vars.json", json.dumps(extra_vars, indent=1, sort_keys=True) + "\n")
    paths.write_atomic(folder / "limit", "".join(f"{h}\n" for h in hosts))
    return ["ansible-playbook", "-i", inventory, f"rtforge.rtforge.{name}", "-e", f"@{folder / 'vars.json'}",
            "--limit", f"@{folder / 'limit'}", "--forks", str(max(1, forks)), "--skip-tags", "always"]


def run(argv: list[str], folder: Path, on_event: Callable[[dict], None],
        serve: Callable[[str, list[str]], list[str]] | None = None) -> int:
    """Run the play, calling on_event for each event; its exit status.  Ctrl-C (or SIGTERM) is passed
    on to the play, whose last events are still read; then Interrupted is raised.  serve(socket, argv):
    the command line that runs argv under a server listening on socket."""
    env = ansible_env({
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_COLLECTIONS_PATHS": str(COLLECTIONS),
        "ANSIBLE_STDOUT_CALLBACK": "rtforge.rtforge.events", "ANSIBLE_LOG_PATH": str(folder / "ansible.log"),
        "ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH": "ignore",
        # the modules run rtforge with this machine's Python environment, as this rtforge runs
        "PYTHONUNBUFFERED": "1"})
    # the server's socket: in a folder of its own (a Unix socket's path has ~100 bytes at most)
    private = tempfile.mkdtemp(prefix="rtforge-fleet-")
    if serve is not None:
        argv = serve(os.path.join(private, "forkserver"), argv)
    try:
        append = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        with os.fdopen(paths.open_existing(folder / "ansible.stderr", append), "ab") as err, \
                os.fdopen(paths.open_existing(folder / "events.jsonl", append), "a") as log:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                 text=True, start_new_session=True)
            try:
                _read(p, on_event, log)
                return p.wait()
            except KeyboardInterrupt:
                _interrupt(p, on_event)
                raise Interrupted() from None
            finally:
                if p.poll() is None:
                    _kill(p)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _read(p: subprocess.Popen, on_event: Callable[[dict], None], log=None) -> None:
    assert p.stdout is not None
    for line in p.stdout:
        with deferred_signals():  # a Ctrl-C acts after the event is logged and shown, once
            if log is not None:
                log.write(line)   # the play's events, kept beside its record
                log.flush()
            try:
                event = json.loads(line)
            except ValueError:
                continue  # not ours (a plugin that prints): the log has it
            if isinstance(event, dict):
                on_event(event)


def _interrupt(p: subprocess.Popen, on_event: Callable[[dict], None]) -> None:
    """Pass Ctrl-C on to the play and read what it says until it ends (or the grace is over)."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + INTERRUPT_GRACE_S
        import selectors
        sel = selectors.DefaultSelector()
        assert p.stdout is not None
        sel.register(p.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=0.5):
                if p.poll() is not None:
                    break
                continue
            line = p.stdout.readline()
            if not line:
                break
            try:
                event = json.loads(line)
                if isinstance(event, dict):
                    on_event(event)
            except ValueError:
                pass
        _kill(p)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _kill(p: subprocess.Popen) -> None:
    """The play and everything it started (its session), if still there."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
