"""What the monitor needs from its target, asked in one round trip, and the
probe put in its place there.

A board needs no Python: the probe is built statically for its `uname -m`
(measure/probebuild.py) and uploaded to spec.PROGRAM, checked by sha256
there.  The monitor runs as root (SCHED_FIFO, mlockall, its folder under
/var/lib); a login that is not root needs passwordless sudo, as runs do.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..device import ConnectionLost, LocalTransport, Transport
from ..device.transport.facts import read_facts_then
from ..errors import UserError
from ..measure import trace as tracing
from ..measure.probebuild import build_probe
from .spec import DEBIAN_TEXTFILE_DIR, PROGRAM, MonitorSpec

# The tools the monitor needs there, and their Debian packages (a board may be a minimal system).
TOOLS = {"sh": "dash", "tail": "coreutils", "head": "coreutils", "wc": "coreutils", "sha256sum": "coreutils",
         "tar": "tar"}
PRIVILEGE_HINT = ("the monitor needs SCHED_FIFO and mlockall: run it as root (or with sudo), "
                  "or connect to the board as root")


@dataclass
class Facts:
    machine: str
    hostname: str
    is_root: bool
    systemd: bool            # systemd is PID 1 (/run/systemd/system exists)
    systemctl: bool
    rtla: str | None         # its path there
    debian_textfile: bool    # node_exporter's textfile folder exists (Debian's package)


def where(transport: Transport) -> str:
    return "here" if isinstance(transport, LocalTransport) else f"on {transport.name}"


def facts(transport: Transport) -> Facts:
    """The target's facts (the one facts reader, device/transport/facts.py,
    in one round trip), or one sentence when it cannot be reached or lacks a tool."""
    try:
        f, said, _ = read_facts_then(transport, tools=[*TOOLS, "systemctl", "rtla"], timeout=60,
                                     then=["sh", "-c", '[ -d "$1" ] && echo textfile', "sh", DEBIAN_TEXTFILE_DIR])
    except ConnectionLost as e:
        detail = str(e).split(": ", 1)[-1]
        raise UserError(f"cannot reach {transport.name} over SSH ({detail}): check the host name, "
                        "or name it in your ssh config (--ssh-config FILE)") from None
    missing = [t for t in TOOLS if t not in f.tools]
    if missing or not f.machine:
        tool = missing[0] if missing else "sh"
        raise UserError(f"the monitor needs {tool} {where(transport)}, which is not installed: "
                        f"apt install {TOOLS.get(tool, 'coreutils')}")
    return Facts(machine=f.machine, hostname=f.hostname or transport.name, is_root=f.is_root, systemd=f.systemd,
                 systemctl="systemctl" in f.tools, rtla=f.paths.get("rtla"), debian_textfile="textfile" in said)


def install_probe(transport: Transport, f: Facts, on_step=lambda s: None) -> str:
    """Build the probe for the target and put it at PROGRAM there (checked)."""
    local = isinstance(transport, LocalTransport)
    on_step(f"building the probe for {f.machine}")
    # a board's libraries may differ from ours: static for any board
    probe = build_probe(None if local else f.machine, static=None if local else True)
    on_step(f"installing the probe as {PROGRAM}" + ("" if local else f" on {transport.name}"))
    transport.run(["mkdir", "-p", "--", PROGRAM.rsplit("/", 1)[0]], sudo=True, check=True,
                  step="creating the probe's folder")
    transport.put_verified(probe, PROGRAM, sudo=True, step="installing the probe")
    return PROGRAM


def check_privileges(transport: Transport, spec: MonitorSpec) -> None:
    r = transport.run([PROGRAM, "--check", "--priority", str(spec.priority)], sudo=True,
                      step="checking RT privileges")
    if r.returncode == 3:
        reason = r.stderr.strip().removeprefix("rtprobe: ")
        raise UserError(f"{reason} {where(transport)}: {PRIVILEGE_HINT}")
    if r.returncode:
        raise UserError(f"the probe does not run {where(transport)} ({r.stderr.strip() or r.returncode}): "
                        "is its architecture one rtforge builds for?")


def choose_rtla(transport: Transport, f: Facts, spec: MonitorSpec) -> str | None:
    """With --alert-us, rtla's analysis after an alert window when the target
    can trace (the same checks as `latency --trace`); else why not, for the
    user to read -- the alert's spikes are kept either way."""
    if not spec.alert_us:
        return None
    if not f.rtla:
        return "rtla is not installed there (apt install rtla), so alerts keep their spikes without an analysis"
    support = tracing.detect(transport, sudo=True)
    try:
        tracing.require(support, where(transport), True)
    except UserError as e:
        why = str(e).replace("--trace needs", "rtla's analysis of an alert needs", 1)
        return f"{why}; alerts keep their spikes without an analysis"
    spec.rtla = f.rtla
    return None
