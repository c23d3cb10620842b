"""rtforge-monitor.service: the probe's soak mode as a systemd service on a
board (or on this machine), started at boot, restarted after a crash.

The unit runs the probe itself (a board needs no Python): its ExecStart= is
exactly `MonitorSpec.argv()`, the command `monitor run` runs in the
foreground.  Each start appends to the same folder, so a reboot or a crash
shows as a gap in it (and a new kernel as an event); the probe's lock keeps
a foreground run and the service from writing it at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..device import LocalTransport, Transport
from ..device.transport import safesh
from ..device.transport.safesh import ensure_owned
from ..errors import UserError
from ..measure.runner import BASE_DIR, busy_with
from . import board
from .spec import DEBIAN_TEXTFILE_DIR, PROGRAM, STATE_DIR, MonitorSpec  # noqa: F401 (STATE_DIR: the CLI's default)

UNIT = "rtforge-monitor.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
START_WAIT_S = 30.0


def _systemd_quote(arg: str) -> str:
    """One ExecStart= word: quoted, with systemd's specifiers (%) and
    variables ($) kept literal."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$") + '"'


def _path_words(paths: list[str]) -> str:
    """Paths for ReadWritePaths= (space-separated; a path with a space is quoted)."""
    return " ".join(_systemd_quote(p) for p in paths)


def unit_text(spec: MonitorSpec) -> str:
    """The unit, hardened as a root daemon on a shared board should be
    (`systemd-analyze security` holds it to 5.0 or less; tests/integration/
    test_monitor_unit.py): a read-only system but for its own folders, no
    network, no new privileges, and of root's capabilities only what
    real-time measuring needs (SCHED_FIFO: CAP_SYS_NICE; mlockall:
    CAP_IPC_LOCK) -- root's own files (/dev/cpu_dma_latency, tracefs)
    need none."""
    writable = [spec.state_dir] + ([spec.textfile_dir] if spec.textfile_dir else [])
    # rtla (an alert's analysis) sets up its tracer in tracefs, below /sys: ProtectKernelTunables
    # would make it read-only, and rtla fails ("Could not init osnoise top", seen on the QEMU guest)
    tunables = "ProtectKernelTunables=yes\n"
    if spec.alert_us and spec.rtla:
        tunables = ""
    return f"""\
# Written by `rtforge monitor start`; `rtforge monitor stop --uninstall` removes it.
[Unit]
Description=rtforge latency monitor (windowed maxima, Prometheus textfile)
# windows are stamped with the wall clock: after it is set, where the board
# waits for that (ordering only: the monitor does not pull in a time service)
After=local-fs.target time-sync.target

[Service]
Type=simple
ExecStart={" ".join(_systemd_quote(a) for a in spec.argv())}
# a crash (or the lock held by a foreground `monitor run`) is retried; bad options (2) are not
Restart=on-failure
RestartSec=10s
RestartPreventExitStatus=2
# SCHED_FIFO threads and mlockall; the probe sets each thread's priority itself
LimitRTPRIO=infinity
LimitMEMLOCK=infinity
# on SIGTERM the probe closes its last window and files its hour and day
TimeoutStopSec=30s
# Hardening: a root daemon on a board other users share
CapabilityBoundingSet=CAP_SYS_NICE CAP_IPC_LOCK
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={_path_words(writable)}
ProtectHome=yes
PrivateTmp=yes
PrivateNetwork=yes
IPAddressDeny=any
RestrictAddressFamilies=AF_UNIX
DevicePolicy=closed
DeviceAllow=/dev/cpu_dma_latency rw
{tunables}ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictNamespaces=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @mount @swap @reboot @raw-io @obsolete @cpu-emulation @debug @module @clock
UMask=0022

[Install]
WantedBy=multi-user.target
"""


def require_systemd(transport: Transport, f: board.Facts) -> None:
    if not (f.systemd and f.systemctl):
        if isinstance(transport, LocalTransport):
            raise UserError("this machine does not run systemd, so the monitor cannot be a service here: "
                            "`rtforge monitor run` measures the same way in the foreground")
        raise UserError(f"{transport.name} does not run systemd, so the monitor cannot be a service there: "
                        f"`rtforge monitor run {transport.name}` measures the same way in the foreground")


def _show(transport: Transport) -> dict[str, str]:
    r = transport.run(["systemctl", "show", UNIT, "-p", "LoadState", "-p", "ActiveState", "-p", "SubState",
                       "-p", "MainPID", "-p", "ActiveEnterTimestamp", "-p", "UnitFileState", "-p", "ExecMainStatus"],
                      step="asking systemd about the monitor")
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def _journal_tail(transport: Transport) -> str:
    r = transport.run(["journalctl", "-u", UNIT, "-n", "5", "--no-pager", "-o", "cat"], sudo=True,
                      step="reading the monitor's journal")
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else "no message in its journal"


def start(transport: Transport, spec: MonitorSpec, *, on_step=lambda s: None,
          dry_run: bool = False) -> tuple[board.Facts, list[str], list[str]]:
    """Install the probe and the service, enable and (re)start it; returns
    the target's facts, notes for the user (rtla, textfile) and the changes
    made, in order.  dry_run: every check, and the changes it would make,
    with nothing changed."""
    on_step(f"connecting to {transport.name}" if not isinstance(transport, LocalTransport) else "checking this machine")
    f = board.facts(transport)
    require_systemd(transport, f)
    notes = []
    if not isinstance(transport, LocalTransport):
        owner = busy_with(transport, BASE_DIR)
        if owner:
            raise UserError(f"{transport.name} is measuring (run {owner}); a monitor beside it would spoil both: "
                            f"let it end, or end it with `rtforge latency {transport.name} --stop {owner}`")
    other = _foreground(transport, spec.state_dir)
    if other:
        raise UserError(f"a monitor runs in the foreground {board.where(transport)} (pid {other}, writing "
                        f"{spec.state_dir}); one monitor per folder: end it (Ctrl-C where it runs) and start again")
    if spec.textfile_dir is None and f.debian_textfile:
        spec.textfile_dir = DEBIAN_TEXTFILE_DIR
        notes.append(f"Prometheus: writing {DEBIAN_TEXTFILE_DIR}/rtforge.prom for the node exporter there")
    elif spec.textfile_dir is not None and transport.run(["test", "-d", spec.textfile_dir]).returncode:
        raise UserError(f"--textfile-dir {spec.textfile_dir} is not a folder {board.where(transport)}: create it, "
                        f"or install prometheus-node-exporter (its folder is {DEBIAN_TEXTFILE_DIR})")
    note = board.choose_rtla(transport, f, spec)   # (asks the tracer; changes nothing)
    if note:
        notes.append(note)
    commands = (["systemctl", "daemon-reload"], ["systemctl", "enable", UNIT], ["systemctl", "restart", UNIT])
    changes = [f"make (or check) {spec.state_dir}: a folder of root's, mode 0755",
               f"install the probe built for {f.machine} as {board.PROGRAM} (its sha256 checked there)",
               f"write {UNIT_PATH}", *(f"run `{' '.join(a)}`" for a in commands)]
    if dry_run:
        return f, notes, changes
    # root's own (the probe refuses another's too); made here: the service's file system is read-only but for it
    ensure_owned(transport, spec.state_dir, readable=(spec.state_dir,), step="making the monitor's folder")
    board.install_probe(transport, f, on_step)
    board.check_privileges(transport, spec)
    on_step(f"installing {UNIT}")
    transport.write_bytes(UNIT_PATH, unit_text(spec).encode(), sudo=True, step=f"writing {UNIT_PATH}")
    for argv in commands:
        transport.run(argv, sudo=True, check=True, step=f"`{' '.join(argv)}`")
    _wait_started(transport, spec)
    return f, notes, changes


def _wait_started(transport: Transport, spec: MonitorSpec) -> None:
    """Until the probe runs and has recorded its start, or one sentence why not."""
    deadline = time.monotonic() + START_WAIT_S
    while True:
        show = _show(transport)
        state = _state(transport, spec.state_dir)
        if show.get("ActiveState") == "active" and state.get("pid") == show.get("MainPID") \
                and state.get("running") == "1":
            return
        if show.get("ActiveState") == "failed" or (show.get("SubState") == "auto-restart") \
                or time.monotonic() > deadline:
            raise UserError(f"{UNIT} did not start {board.where(transport)} "
                            f"({show.get('ActiveState', '?')}/{show.get('SubState', '?')}): {_journal_tail(transport)}")
        time.sleep(0.5)


def is_probe(comm: str) -> bool:
    """A process name (/proc/PID/comm, cut at 15 characters) of the probe:
    `rtprobe` as the service installs it, `rtprobe-<machine>[-static]` as
    rtforge builds it and `monitor run` starts it."""
    return comm == "rtprobe" or comm.startswith("rtprobe-")


def _foreground(transport: Transport, state_dir: str) -> str | None:
    """The pid of a probe writing the folder outside the service, if one runs."""
    state = _state(transport, state_dir)
    pid = state.get("pid", "")
    if state.get("running") != "1" or not pid.isdigit():
        return None
    comm = transport.run(["cat", f"/proc/{pid}/comm"]).stdout.strip()
    main_pid = _show(transport).get("MainPID") if transport.which("systemctl") else None
    return pid if is_probe(comm) and pid != main_pid else None


def _state(transport: Transport, state_dir: str) -> dict[str, str]:
    # bounded, regular files only: --state-dir may name a folder others can write
    data = transport.read_optional(f"{state_dir}/state", step="reading the monitor's state")
    return dict(line.partition(" ")[::2] for line in data.decode(errors="replace").splitlines()) if data else {}


def stop(transport: Transport, *, uninstall: bool = False) -> bool:
    """Stop and disable the service (the folder and its windows stay);
    uninstall also removes the unit and the probe.  False: none was installed."""
    f = board.facts(transport)
    require_systemd(transport, f)
    if _show(transport).get("LoadState") in (None, "not-found"):
        return False
    transport.run(["systemctl", "disable", "--now", UNIT], sudo=True, check=True, step=f"stopping {UNIT}")
    if uninstall:
        transport.run(["rm", "-f", "--", UNIT_PATH, PROGRAM], sudo=True, check=True, step="removing the monitor")
        transport.run(["systemctl", "daemon-reload"], sudo=True, check=True, step="`systemctl daemon-reload`")
    return True


# One round trip: the service, the folder's state and what it holds.  Only
# regular files are read (a FIFO would block: --state-dir may name a folder
# others can write), the state bounded (data/safe.sh's rtforge_cat).
_STATUS = safesh.script(r"""
S=$1
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl show rtforge-monitor.service -p LoadState -p ActiveState -p SubState -p ActiveEnterTimestamp \
        -p MainPID -p UnitFileState 2>/dev/null | sed 's/^/svc /'
fi
if [ -e "$S/state" ] && [ ! -f "$S/state" ]; then echo "refused state"; exit 0; fi
st=$(rtforge_cat "$S/state" 65536 2>/dev/null)
[ -n "$st" ] && printf '%s\n' "$st" | sed 's/^/state /'
p=$(printf '%s\n' "$st" | sed -n 's/^pid //p')
[ -n "$p" ] && [ -r "/proc/$p/comm" ] && printf 'alive %s\n' "$(cat "/proc/$p/comm")"
n=0
for f in "$S"/windows/*.jsonl; do [ -f "$f" ] && n=$((n + $(wc -l < "$f"))); done
echo "windows $n"
for f in "$S"/events.1.jsonl "$S"/events.jsonl; do [ -f "$f" ] && grep '"event":"gap"' "$f"; done | sed 's/^/gap /'
last=$(ls "$S"/windows/*.jsonl 2>/dev/null | tail -n 1)
[ -f "$last" ] && printf 'last %s\n' "$(tail -n 1 "$last" | head -c 8000000)"
printf 'du %s\n' "$(du -sk "$S" 2>/dev/null | cut -f1)"
""")


@dataclass
class Status:
    service: dict[str, str] = field(default_factory=dict)   # systemctl show's properties
    state: dict[str, str] = field(default_factory=dict)     # the folder's state file
    alive: bool = False                                      # the probe of the state file runs
    windows: int = 0
    gaps: list[str] = field(default_factory=list)            # the gap events' lines
    last: str | None = None                                  # the newest window's line
    used_kb: int | None = None


def status(transport: Transport, state_dir: str) -> Status:
    board.facts(transport)  # reachable, with its tools; one sentence otherwise
    out = transport.run(["sh", "-c", _STATUS, "sh", state_dir], step="reading the monitor's state").stdout
    st = Status()
    for line in out.splitlines():
        key, _, rest = line.partition(" ")
        if key == "svc" and "=" in rest:
            k, _, v = rest.partition("=")
            st.service[k] = v
        elif key == "refused":
            raise UserError(f"{state_dir}/state {board.where(transport)} is not a regular file (a FIFO, a device, "
                            "a folder?): it is not a monitor's folder, or someone put it there; remove it")
        elif key == "state":
            k, _, v = rest.partition(" ")
            st.state[k] = v
        elif key == "alive":
            st.alive = is_probe(rest.strip())
        elif key == "windows" and rest.strip().isdigit():
            st.windows = int(rest)
        elif key == "gap":
            st.gaps.append(rest)
        elif key == "last":
            st.last = rest
        elif key == "du" and rest.strip().isdigit():
            st.used_kb = int(rest)
    st.alive = st.alive and st.state.get("running") == "1"
    return st
