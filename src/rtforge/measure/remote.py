"""Latency runs on a board, measured from the host, that survive a dropped
connection.

The host does the thinking, the board only runs: ``start_remote_run``
checks everything it can (arguments, tools, privileges, whether the board
is already measuring) before anything is written, builds the static probe
for the board's `uname -m`, uploads it with the POSIX-sh runner
(data/runner.sh) into BASE/runs/<run-id>/ and starts the runner detached
from the SSH session (a systemd transient unit, or setsid).  From then on
the run needs no connection: ``follow`` polls it (a lost connection is
retried), ``collect`` brings it into the store (verified) and removes it
from the board; `attach` and `fetch` do the same from a fresh handle.

The `net` load floods the board *from the host* (ping -f to the address
the SSH connection reached), so it runs here, only while the host follows
the run; the board's own loads run under the runner.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

from ..errors import UserError
from ..results.model import RunResult
from ..results.store import Store
from ..target import ConnectionLost, LocalTransport, Transport
from .boardrun import BASE_DIR, BoardRun, NothingMeasured, Poll, busy_with, runner_text
from .engines import PRIVILEGE_HINT, ProbeEngine
from .loads import LoadSet, deadline_for, load_profiles
from .probebuild import build_probe
from .session import Progress, held_signals
from .spec import LatencySpec, format_cpu_list, parse_cpu_list

# One poll costs the board ~5 ms of CPU here (sshd's channel, the runner's
# status, one tail; bench/remote_overhead.py): every 5 s stays well under
# 0.5 % of one CPU even on a board a few times slower.  Between polls the
# display's clock runs on locally.
POLL_S = 5.0
TICK_S = 0.5
STOP_TIMEOUT_S = 60.0   # the probe ends within a second, loads within 5 s
START_TIMEOUT_S = 120.0
HOST_LOADS = ("net",)   # run on the host, aimed at the board
# Tools the runner itself needs on the board -> Debian package.
RUNNER_TOOLS = {"setsid": "util-linux", "tar": "tar", "sha256sum": "coreutils", "timeout": "coreutils"}
BUSY_STATUS = 75

# One round trip: what the host must know about the board before it starts.
# "$3" of SSH_CONNECTION is the board's own address of this connection: the
# address the host can reach it at, also through an ssh config alias.
_CONTACT = r"""
for t in "$@"; do command -v "$t" >/dev/null 2>&1 && printf 'tool %s\n' "$t"; done
printf 'machine %s\n' "$(uname -m)"
printf 'hostname %s\n' "$(uname -n)"
printf 'uid %s\n' "$(id -u)"
printf 'online %s\n' "$(cat /sys/devices/system/cpu/online 2>/dev/null)"
printf 'ncpus %s\n' "$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
set -- ${SSH_CONNECTION:-}
printf 'address %s\n' "${3:-127.0.0.1}"
"""


@dataclass
class Contact:
    machine: str
    hostname: str
    is_root: bool
    address: str
    ncpus: int
    online: list[int]
    tools: set[str] = field(default_factory=set)


def first_contact(transport: Transport, tools: list[str]) -> Contact:
    try:
        out = transport.run(["sh", "-c", _CONTACT, "sh", *tools], check=True, timeout=60,
                            step="reading the board's facts").stdout
    except ConnectionLost as e:
        detail = str(e).split(": ", 1)[-1]
        raise UserError(f"cannot reach {transport.name} over SSH ({detail}): check the host name, "
                        "or name it in your ssh config (--ssh-config FILE)") from None
    v: dict[str, str] = {}
    found = set()
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key == "tool":
            found.add(value)
        else:
            v[key] = value.strip()
    online = parse_cpu_list(v["online"]) if v.get("online") else list(range(int(v.get("ncpus") or 1)))
    return Contact(machine=v["machine"], hostname=v.get("hostname") or transport.name, is_root=v.get("uid") == "0",
                   address=v.get("address") or "127.0.0.1", ncpus=int(v.get("ncpus") or len(online)),
                   online=online, tools=found)


def board_loads(spec: LatencySpec) -> list[str]:
    return [n for n in spec.loads if n not in HOST_LOADS]


def _check_tools(spec: LatencySpec, transport: Transport, contact: Contact, install: bool,
                 on_step: Callable[[str], None]) -> None:
    """Every tool the board's loads and the runner need, or one sentence."""
    profiles = load_profiles()
    needed = {p.argv[0]: (p.package, p.name) for p in (profiles[n] for n in board_loads(spec))}
    needed.update({t: (pkg, None) for t, pkg in RUNNER_TOOLS.items()})
    missing = {t: v for t, v in needed.items() if t not in contact.tools}
    if not missing:
        return
    packages = sorted({pkg for pkg, _ in missing.values()})
    if install:
        on_step(f"installing {' '.join(packages)} on {transport.name} with apt-get")
        r = transport.run(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", *packages],
                          sudo=True, timeout=1800, step=f"installing {' '.join(packages)}")
        if r.returncode:
            last = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
            raise UserError(f"apt-get could not install {' '.join(packages)} on {transport.name} ({last}): "
                            "install it there by hand")
        return
    tool, (package, load) = next(iter(sorted(missing.items())))
    what = f"the '{load}' load needs {tool}" if load else f"rtforge needs {tool}"
    raise UserError(f"{what} on {transport.name}, which is not installed there: install it with "
                    f"`apt install {package}` on the board, or pass --install")


def _load_commands(names: list[str], ncpus: int, deadline_s: int, run_dir: str) -> list[tuple[str, str]]:
    """(file name, quoted command line) per load process, from data/loads.toml."""
    profiles = load_profiles()
    out: list[tuple[str, str]] = []
    for name in names:
        p = profiles[name]
        values = {"ncpus": ncpus, "deadline_s": deadline_s, "tmpdir": f"{run_dir}/tmp", "net_target": ""}
        argv = [a.format(**values) for a in p.argv]
        if p.restart:
            # runs in rounds until the deadline; a failing round is not a busy loop
            argv = ["timeout", str(deadline_s), "sh", "-c", 'while :; do "$@" || sleep 1; done', "sh", *argv]
        for _ in range(ncpus if p.instances == "ncpus" else int(p.instances)):
            out.append((f"{len(out) + 1:02d}-{name}", shlex.join(argv)))
    return out


def _config(spec: LatencySpec, transport: Transport, run_dir: str, emulated: bool) -> dict:
    cfg = {
        "interval_us": spec.interval_us, "priority": spec.priority, "policy": spec.policy,
        "cpus": spec.cpus, "loads": spec.loads,
        "spike_threshold_ns": round(spec.spike_us * 1000) if spec.spike_us is not None else spec.interval_us * 500,
        "checkpoint_s": spec.checkpoint_s,
        "board": {"destination": transport.name, "dir": run_dir, "net_from_host": "net" in spec.loads},
    }
    if emulated:
        cfg["emulated"] = True
    return cfg


def reproducer(spec: LatencySpec, host: str) -> str:
    return spec.reproducer().replace("rtforge latency", f"rtforge latency {shlex.quote(host)}", 1)


def expected_s(doc: dict) -> float | None:
    """How long a run should take, from its run.json."""
    req, cfg = doc.get("requested") or {}, doc.get("config") or {}
    if req.get("duration_s"):
        return float(req["duration_s"])
    if req.get("loops") and cfg.get("interval_us"):
        return req["loops"] * cfg["interval_us"] / 1e6
    return None


@dataclass
class Started:
    run: BoardRun
    address: str          # where the host's net load aims
    expected_s: float | None
    loads: list[str]


def start_remote_run(spec: LatencySpec, transport: Transport, store: Store, *, install: bool = False,
                     detach: bool = False, base: str = BASE_DIR, launcher: str = "auto",
                     machine: str | None = None, probe_prefix: tuple[str, ...] = (),
                     on_step: Callable[[str], None] | None = None,
                     on_launch: Callable[[BoardRun], None] | None = None) -> Started:
    """Check, upload and start a run on the board; returns once it measures.
    machine/probe_prefix run another architecture's probe through an
    interpreter (tests: qemu-aarch64-static)."""
    step = on_step or (lambda s: None)
    if spec.engine != "probe":
        raise UserError("remote runs use the probe engine: drop --engine cyclictest (it runs only on this machine)")
    spec.validate(None)
    if detach and set(spec.loads) & set(HOST_LOADS):
        raise UserError("the net load floods the board from this machine, so it cannot run with --detach: "
                        "drop --detach (the run still survives a dropped connection) or drop 'net'")
    if "net" in spec.loads:
        LoadSet(["net"], LocalTransport(), ncpus=1, deadline_s=1).check()
    profiles = load_profiles()
    step(f"connecting to {transport.name}")
    contact = first_contact(transport, sorted({profiles[n].argv[0] for n in board_loads(spec)} | set(RUNNER_TOOLS)))
    if spec.cpus is not None and set(spec.cpus) - set(contact.online):
        missing = format_cpu_list(sorted(set(spec.cpus) - set(contact.online)))
        raise UserError(f"CPU {missing} is not available on {transport.name}: its CPUs are "
                        f"{format_cpu_list(contact.online)}")
    _check_tools(spec, transport, contact, install, step)
    owner = busy_with(transport, base)
    if owner:
        raise busy_error(transport.name, owner)
    arch = machine or contact.machine
    step(f"building the probe for {arch}")
    probe_local = build_probe(arch, static=True)  # a board's libraries may differ from ours

    now = datetime.now(timezone.utc)
    run_id = store.new_run_id(contact.hostname, now)
    run = BoardRun(transport, run_id, sudo=not contact.is_root, base=base)
    d = run.dir
    engine = ProbeEngine(spec, transport, PurePosixPath(f"{d}/rtprobe"))  # type: ignore[arg-type]
    probe_argv = [*probe_prefix, *engine.argv(PurePosixPath(f"{d}/raw"))]  # type: ignore[arg-type]
    result = RunResult(
        run_id=run_id, engine="probe", state="running", host=contact.hostname,
        start_time=now.isoformat(timespec="seconds"), label=spec.label,
        requested={"duration_s": spec.duration_s, "loops": spec.loops},
        config=_config(spec, transport, d, emulated=bool(probe_prefix)),
        reproducer=reproducer(spec, transport.name), engine_argv=probe_argv,
    )
    loads = _load_commands(board_loads(spec), contact.ncpus, deadline_for(spec.expected_s), d)

    launched = False
    try:
        step(f"uploading the probe and the runner to {transport.name}:{d}")
        with tempfile.TemporaryDirectory(prefix="rtforge-stage-") as tmp:
            stage = Path(tmp)
            shutil.copy(probe_local, stage / "rtprobe")
            (stage / "runner.sh").write_text(runner_text())
            (stage / "run.json").write_text(result.to_json())
            (stage / "probe.cmd").write_text(shlex.join(probe_argv) + "\n")
            (stage / "loads").mkdir()
            for name, cmd in loads:
                (stage / "loads" / name).write_text(cmd + "\n")
            (stage / "raw").mkdir()
            # tar carries modes, of "." too: readable by the login, whoever owns it
            for path in (stage, *stage.rglob("*")):
                path.chmod(0o755 if path.is_dir() or path.name == "rtprobe" else 0o644)
            transport.put_tree(stage, d, sudo=run.sudo, step="uploading the run")
            local = LocalTransport().sha256([str(stage / "rtprobe"), str(stage / "runner.sh")])
        remote = transport.sha256([f"{d}/rtprobe", f"{d}/runner.sh"], step="checking the upload")
        if [remote.get(f"{d}/{n}") for n in ("rtprobe", "runner.sh")] != list(local.values()):
            raise UserError(f"the probe arrived damaged on {transport.name} (checksum differs): "
                            "check the board's disk space and try again")
        _check_privileges(transport, run, probe_prefix, spec)
        step("starting the run")
        launched = True
        if on_launch:
            on_launch(run)
        r = transport.run(["sh", f"{d}/runner.sh", "start", d, launcher], sudo=run.sudo,
                          timeout=START_TIMEOUT_S, step="starting the run")
        if r.returncode == BUSY_STATUS:  # another host started one since we looked
            launched = False
            raise busy_error(transport.name, r.stdout.split()[-1])
        word = (r.stdout.split() + ["", ""])[1]
        if r.returncode or word in ("failed", "starting", ""):
            launched = False
            detail = r.stdout.strip().removeprefix("started ") or r.stderr.strip() or f"exit status {r.returncode}"
            raise UserError(f"the run could not start on {transport.name} ({detail}): nothing was measured")
    except BaseException:
        if not launched:
            with held_signals():
                try:
                    run.remove()
                except (UserError, OSError):
                    pass  # the board is gone: nothing half-written can matter there
        raise
    return Started(run, contact.address, spec.expected_s, spec.loads)


def busy_error(board: str, run_id: str) -> UserError:
    return UserError(f"{board} is already measuring (run {run_id}); two runs would spoil each other's numbers: "
                     f"follow it with `rtforge attach {board} {run_id}` or end it with "
                     f"`rtforge latency {board} --stop {run_id}`")


def _check_privileges(transport: Transport, run: BoardRun, prefix: tuple[str, ...], spec: LatencySpec) -> None:
    r = transport.run([*prefix, f"{run.dir}/rtprobe", "--check", "--priority", str(spec.priority),
                       "--policy", spec.policy], sudo=run.sudo, step="checking RT privileges")
    if r.returncode == 3:
        reason = r.stderr.strip().removeprefix("rtprobe: ")
        raise UserError(f"{reason} on {transport.name}: {PRIVILEGE_HINT}")
    if r.returncode:
        raise UserError(f"the probe does not run on {transport.name} ({r.stderr.strip() or r.returncode}): "
                        "is the board's architecture one rtforge builds for?")


@contextmanager
def net_flood(address: str, remaining_s: float | None) -> Iterator[LoadSet | None]:
    """The net load, run on this host at the board, for as long as the
    block lasts (and no longer than the run: ping has its own deadline)."""
    flood = LoadSet(["net"], LocalTransport(), ncpus=1, deadline_s=deadline_for(remaining_s), net_target=address)
    flood.check()
    flood.start()
    try:
        yield flood
    finally:
        with held_signals():
            flood.stop()


def follow(run: BoardRun, expected: float | None, *, poll_s: float = POLL_S,
           on_progress: Callable[[Progress], None] | None = None,
           on_connection: Callable[[str | None], None] | None = None,
           flood: LoadSet | None = None) -> Poll:
    """Poll until the runner is gone.  A lost connection is reported through
    on_connection(message) and retried; on_connection(None) when it is back."""
    lost = False
    while True:
        try:
            p = run.poll()
        except ConnectionLost as e:
            lost = True
            if on_connection:
                on_connection(str(e))
            time.sleep(poll_s)
            continue
        if lost:
            lost = False
            if on_connection:
                on_connection(None)
        if flood is not None:
            flood.poll(p.elapsed_s or 0.0)
        if not p.alive and p.state != "starting":
            if on_progress and p.elapsed_s is not None:
                on_progress(Progress(p.elapsed_s, expected, p.max_ns))
            return p
        polled = time.monotonic()
        while (waited := time.monotonic() - polled) < poll_s:
            if on_progress and p.elapsed_s is not None:
                guess = p.elapsed_s + waited
                on_progress(Progress(min(guess, expected) if expected else guess, expected, p.max_ns))
            time.sleep(min(TICK_S, poll_s - waited))


def collect(run: BoardRun, store: Store) -> RunResult:
    """Fetch a run whose runner is gone into the store, then remove it from
    the board.  A killed run is cleaned up and marked first."""
    p = run.poll()
    if p.alive:
        raise UserError(f"run {run.run_id} is still running on {run.t.name}: follow it with "
                        f"`rtforge attach {run.t.name} {run.run_id}` or end it with "
                        f"`rtforge latency {run.t.name} --stop {run.run_id}`")
    if not p.final:
        run.reap()
    try:
        result = run.fetch(store)
    except NothingMeasured:
        run.remove()
        raise
    run.remove()  # only now: the store holds a verified copy
    return result


def stop_run(run: BoardRun, *, timeout_s: float = STOP_TIMEOUT_S, poll_s: float = 0.2) -> None:
    """End a run cleanly (the runner stops the probe, then the loads) and
    wait until the runner is gone."""
    if not run.stop():
        return
    deadline = time.monotonic() + timeout_s
    while run.poll().alive:
        if time.monotonic() > deadline:
            raise UserError(f"run {run.run_id} on {run.t.name} did not stop within {timeout_s:.0f} s: "
                            "look at the board (`ps -ef | grep rtprobe`)")
        time.sleep(poll_s)
