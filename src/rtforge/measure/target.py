"""Where a run happens: this machine or a board over SSH, and what rtforge
must know about it before anything starts -- its architecture, CPUs,
privileges and tools -- in one round trip.

A run on this machine and one on a board go through the same runner
(data/runner.sh); they differ in where the run's folder is (the store's
own, or BASE_DIR on the board, fetched when the run ends), in whether sudo
is needed, and in the net load (a board is flooded from this host).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..device import ConnectionLost, LocalTransport, Transport
from ..device.transport.facts import read_facts_then
from ..errors import UserError
from ..paths import resolved
from ..results.store.runstore import Store
from .loads import HOST_LOADS, tools_needed
from .runner import BASE_DIR
from .spec import parse_cpu_list

# Tools the runner itself needs on the target -> Debian package.
RUNNER_TOOLS = {"sh": "dash", "setsid": "util-linux", "tar": "tar", "sha256sum": "coreutils",
                "timeout": "coreutils", "find": "findutils"}
# Engines other than the probe (which rtforge builds and brings along).
ENGINE_TOOLS = {"cyclictest": "rt-tests"}
# What --trace runs beside the engine (measure/trace.py).
TRACE_TOOLS = {"rtla": "rtla"}

@dataclass
class Contact:
    machine: str
    hostname: str
    is_root: bool
    address: str          # where this host reaches the target (the net load's aim)
    ncpus: int            # online CPUs: the loads' {ncpus}
    cpus: list[int]       # CPUs a run may measure: online and allowed
    tools: set[str] = field(default_factory=set)
    then: str = ""        # what the command first_contact ran after the facts printed
    then_status: int = 0  # and its exit status


@dataclass
class RunSite:
    """Where a run's folder lives and its runner runs: this machine or a board."""
    transport: Transport
    base: str             # runs live in BASE/runs/<run-id>
    local: bool           # this machine: BASE is the store's root, so a run's folder is its store folder

    @property
    def where(self) -> str:
        return "here" if self.local else f"on {self.transport.name}"

    @property
    def whose(self) -> str:
        return "this machine's" if self.local else "its"


def make_target(store: Store, transport: Transport | None = None, base: str | None = None) -> RunSite:
    """This machine (no transport, or a LocalTransport without a base) or a board."""
    if transport is None or (isinstance(transport, LocalTransport) and base is None):
        return RunSite(transport or LocalTransport(), str(resolved(store.root, f"the run store {store.root}")), True)
    return RunSite(transport, base or BASE_DIR, False)


def first_contact(target: RunSite, tools: list[str], then: list[str] | None = None) -> Contact:
    """The target's facts; `then`, a command run in the same round trip (its output: Contact.then)."""
    t = target.transport
    try:
        f, said, status = read_facts_then(t, tools=tools, then=then, timeout=60)
    except ConnectionLost as e:
        detail = str(e).split(": ", 1)[-1]
        raise UserError(f"cannot reach {t.name} over SSH ({detail}): check the host name, "
                        "or name it in your ssh config (--ssh-config FILE)") from None
    t.note_root(f.is_root)
    online = parse_cpu_list(f.online) if f.online else list(range(f.ncpus or 1))
    allowed = set(parse_cpu_list(f.allowed)) if f.allowed else set(online)
    return Contact(machine=f.machine, hostname=f.hostname or ("localhost" if target.local else t.name),
                   is_root=f.is_root, address="127.0.0.1" if target.local else f.ssh_address or "127.0.0.1",
                   ncpus=f.ncpus or len(online), cpus=[c for c in online if c in allowed] or online, tools=f.tools,
                   then=said, then_status=status)


def target_loads(loads: list[str], target: RunSite) -> list[str]:
    """The loads the runner starts on the target (a board's net load runs here)."""
    return loads if target.local else [n for n in loads if n not in HOST_LOADS]


def tools_for(engine: str, loads: list[str], target: RunSite,
              trace: bool = False) -> dict[str, tuple[str, str | None]]:
    """tool -> (Debian package, the load that needs it, if one does), in the order they are named."""
    needed: dict[str, tuple[str, str | None]] = {}
    if engine in ENGINE_TOOLS:
        needed[engine] = (ENGINE_TOOLS[engine], None)
    if trace:
        needed.update({t: (pkg, None) for t, pkg in TRACE_TOOLS.items()})
    needed.update(tools_needed(target_loads(loads, target)))
    needed.update({t: (pkg, None) for t, pkg in RUNNER_TOOLS.items() if t not in needed})
    return needed


def check_tools(needed: dict[str, tuple[str, str | None]], target: RunSite, contact: Contact, install: bool,
                on_step: Callable[[str], None]) -> None:
    """Every tool the engine, the loads and the runner need, or one sentence
    naming the Debian package (a board's are installed with --install)."""
    missing = {t: v for t, v in needed.items() if t not in contact.tools}
    if not missing:
        return
    t = target.transport
    tool, (package, load) = next(iter(missing.items()))
    what = (f"the '{load}' load needs {tool}" if load else f"--trace needs {tool}" if tool in TRACE_TOOLS
            else f"rtforge needs {tool}")
    if target.local:
        if tool in ENGINE_TOOLS:
            raise UserError(f"{tool} is not installed: apt install {package}")
        raise UserError(f"{what}, which is not installed: apt install {package}")
    packages = sorted({pkg for pkg, _ in missing.values()})
    if install:
        on_step(f"installing {' '.join(packages)} on {t.name} with apt-get")
        r = t.run(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", *packages],
                  sudo=True, timeout=1800, step=f"installing {' '.join(packages)}")
        if r.returncode:
            last = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
            raise UserError(f"apt-get could not install {' '.join(packages)} on {t.name} ({last}): "
                            "install it there by hand")
        return
    if tool in ENGINE_TOOLS:
        what = f"the {tool} engine needs {tool}"
    raise UserError(f"{what} on {t.name}, which is not installed there: install it with "
                    f"`apt install {package}` on the board, or pass --install")
