"""Starting a run, on this machine or on a board, the same way.

``start_run`` checks everything it can (arguments, tools, privileges,
whether the target is already measuring) before anything is written,
builds the probe for the target's `uname -m`, stages the run's folder --
programs, the runner (data/runner.sh), the engine's and the loads' command
lines, the run's description -- copies it to the target, checks it there,
and starts the runner detached from rtforge: a systemd transient unit or
setsid.  From then on the run needs no rtforge: a dropped connection, a
closed laptop or a killed rtforge lose nothing.

On this machine the run's folder *is* its folder in the store, saved with
its metadata before the runner starts, so `runs` and `show` see it at once
and finish it from its files if nobody else does.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..device import ConnectionLost, Transport
from ..device.transport import safesh
from ..errors import UserError
from ..results.model import RunResult
from ..results.store.runstore import Store
from ..results.system import describe
from ..signals import held_signals
from . import trace as tracing
from .engines import PRIVILEGE_HINT, EngineCommand, engine_command
from .lifecycle import owner_of, packaged_runner, runner_owner, runner_sha256, runner_text
from .loads import HOST_LOADS, HostFlood, check_privileges, deadline_for, load_commands
from .probebuild import build_probe
from .runner import Poll, Runner, as_root, busy_with, script_argv
from .spec import LatencySpec
from .target import Contact, RunSite, check_tools, first_contact, make_target, target_loads, tools_for

START_TIMEOUT_S = 120.0
BUSY_STATUS = 75


@dataclass
class Started:
    run: Runner
    target: RunSite
    address: str              # where this host reaches the target (a board's net load aims there)
    expected_s: float | None
    loads: list[str]
    result: RunResult         # as described at the start
    flood: HostFlood | None = None  # a board's net load, from this host: stop it when done following
    first: Poll | None = None       # what the start said, standing in for the first poll (one round trip fewer)


def busy_error(target: RunSite, run_id: str) -> UserError:
    name = target.transport.name
    if target.local:
        return UserError(f"this machine is already measuring (run {run_id}); two runs would spoil each other's "
                         f"numbers: follow it with `rtforge attach {run_id}` or end it with "
                         f"`rtforge latency --stop {run_id}`")
    return UserError(f"{name} is already measuring (run {run_id}); two runs would spoil each other's numbers: "
                     f"follow it with `rtforge attach {name} {run_id}` or end it with "
                     f"`rtforge latency {name} --stop {run_id}`")


def launch(target: RunSite, contact: Contact, store: Store, result: RunResult, engine: EngineCommand,
           files: dict[str, Path | str], *, loads: list[tuple[str, str]], settle_s: float,
           probe_prefix: tuple[str, ...] = (), check_rt: bool = True, on_step: Callable[[str], None],
           on_launch: Callable[[Runner], None] | None = None) -> tuple[Runner, str]:
    """Stage the run's folder, copy it to the target, check it there, and
    start the runner; the runner and the state it said it started in.
    files: name -> a local file or text.  On this machine the result is
    saved into the store before the runner starts.  A failure before the
    runner was asked to start leaves nothing, there or here."""
    t = target.transport
    run = Runner(t, result.run_id, base=target.base, sudo=None if not target.local else False,
                 doc=result.to_dict())
    d = run.dir
    launched = saved = False
    # On this machine: what did not exist before, so a refused run leaves no trace
    created = [p for p in (Path(target.base), Path(target.base) / "runs") if not p.exists()] if target.local else []
    try:
        on_step(f"copying the run to {t.name}:{d}" if not target.local else f"preparing the run in {d}")
        with tempfile.TemporaryDirectory(prefix="rtforge-stage-") as tmp:
            stage = _stage(Path(tmp), result, engine, files, loads)
            t.put_verified(stage, d, sudo=run.sudo, step="copying the run")  # every file, checked there
        described = False
        if "rtprobe" in files:  # the system's metadata, written before the run starts, so a crash keeps it
            meta = _check_and_describe(target, run, probe_prefix, result, check_rt)
            if meta is not None:
                result.system, described = describe(meta), True
        if target.local:
            result.owner = owner_of(os.getpid())
            store.save(result)
            saved = True
        on_step("starting the run")
        if on_launch:
            on_launch(run)
        launched = True  # from here on the runner may be going
        launcher = "auto" if (contact.is_root or run.sudo) else "setsid"  # systemd-run needs root
        r = _start(run, result.to_json() if described else None, launcher, settle_s)
        try:
            word = _started(target, r)
        except UserError:
            launched = False   # the runner said it did not start: nothing goes on there
            raise
        if target.local:
            result.owner = runner_owner(Path(d))  # the runner owns the run now
            store.save(result)
    except BaseException:
        if not launched:
            with held_signals():
                try:
                    run.remove()
                except (UserError, OSError):
                    pass  # the board is gone: nothing half-written can matter there
                if saved:
                    store.delete(result.run_id)
                for p in reversed(created):
                    shutil.rmtree(p, ignore_errors=True)
        raise
    return run, word


def _start(run: Runner, described: str | None, launcher: str, settle_s: float) -> subprocess.CompletedProcess:
    """The runner's `start` (after run.json with the system's metadata, when
    there is one: one round trip); what it answered, or what the board says
    once it can be asked again when the connection died under it."""
    t, timeout = run.t, START_TIMEOUT_S + settle_s
    # rtforge's own runner text; it executes the folder's runner.sh only once its bytes are rtforge's
    argv = packaged_runner("start", run.dir, launcher, str(round(settle_s * 10)), runner_sha256())
    try:
        if described is not None:
            r = t.write_then_run(f"{run.dir}/raw/runner/run.json", described.encode(), argv, sudo=run.sudo,
                                 timeout=timeout, step="starting the run")
        else:
            r = t.run(argv, sudo=run.sudo, timeout=timeout, step="starting the run")
    except ConnectionLost:
        r = None
    if r is None or r.returncode < 0:
        # The connection (or our ssh client) died under `start`, not the
        # runner: the board alone knows whether the run began.
        r = _ask_after_lost_start(run, r, timeout)
    return r


def _started(target: RunSite, r: subprocess.CompletedProcess) -> str:
    """The state the runner said it started in; UserError when it did not start."""
    if r.returncode == BUSY_STATUS:  # another rtforge started one since we looked
        raise busy_error(target, r.stdout.split()[-1])
    refused = safesh.owned_error(r, "here" if target.local else f"on {target.transport.name}")
    if refused:
        raise refused
    word = (r.stdout.split() + ["", ""])[1]
    if r.returncode or word in ("failed", "starting", "settling", ""):
        detail = r.stdout.strip().removeprefix("started ") or r.stderr.strip() or f"exit status {r.returncode}"
        raise UserError(f"the run could not start on {target.transport.name} ({detail}): nothing was measured")
    return word


def _stage(stage: Path, result: RunResult, engine: EngineCommand, files: dict[str, Path | str],
           loads: list[tuple[str, str]]) -> Path:
    """The run's folder as the runner reads it (measure/lifecycle.py's
    RUNNER_INPUTS), written here before it is copied."""
    (stage / "raw" / "runner").mkdir(parents=True)
    (stage / "loads").mkdir()
    for name, source in {**files, "runner.sh": runner_text()}.items():
        if isinstance(source, Path):
            shutil.copy(source, stage / name)
        else:
            (stage / name).write_text(source)
    (stage / "engine.cmd").write_text(f"{engine.name}\n{shlex.join(engine.argv)}\n")
    if engine.monitor:
        (stage / "monitor.cmd").write_text(shlex.join(engine.monitor) + "\n")
    if engine.trace:
        (stage / "trace.cmd").write_text(tracing.trace_cmd(engine.trace))
    for name, cmd in loads:
        (stage / "loads" / name).write_text(cmd + "\n")
    (stage / "raw" / "runner" / "run.json").write_text(result.to_json())
    # tar carries modes, of "." too: readable by the login, whoever owns it
    executables = {n for n, s in files.items() if isinstance(s, Path) and os.access(s, os.X_OK)}
    for path in (stage, *stage.rglob("*")):
        path.chmod(0o755 if path.is_dir() or path.name in executables else 0o644)
    return stage


def _ask_after_lost_start(run: Runner, lost, timeout_s: float):
    """What `start` would have answered, read from the run's state once the
    target can be reached again: "started WORD" as the runner prints it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            p = run.poll(progress=False)
        except ConnectionLost:
            time.sleep(0.5)
            continue
        if p.state in ("starting", "settling") and p.alive:
            time.sleep(0.3)
            continue
        return subprocess.CompletedProcess([], 0, f"started {p.state} {p.detail}".strip(), "")
    if lost is not None:
        return lost
    raise ConnectionLost(f"lost the connection to {run.t.name} while the run was starting, and it did not come back")


# The probe's privilege check, then (if it passed) the system's metadata: one round trip.
_CHECK_AND_META = ('check=$1 priority=$2 policy=$3; shift 3\n'
                   '[ "$check" = 0 ] || "$@" --check --priority "$priority" --policy "$policy" || exit\n'
                   'printf "\\n@@meta\\n"; exec "$@" --meta')


def _check_and_describe(target: RunSite, run: Runner, prefix: tuple[str, ...], result: RunResult,
                        check: bool) -> dict | None:
    """Refuse a probe that cannot get its priority there (check=True); the
    probe's --meta (None when it could not say)."""
    t = target.transport
    cfg = result.config
    r = t.run(["sh", "-c", _CHECK_AND_META, "sh", "1" if check else "0", str(cfg.get("priority", 90)),
               cfg.get("policy", "fifo"), *prefix, f"{run.dir}/rtprobe"], sudo=run.sudo,
              step="checking RT privileges and reading the system's metadata")
    checked, marker, meta = r.stdout.partition("\n@@meta\n")
    where = "" if target.local else f" on {t.name}"
    if not marker:   # the check refused (or the shell could not run it)
        if r.returncode == 3:
            reason = r.stderr.strip().removeprefix("rtprobe: ")
            raise UserError(f"{reason}{where}: {PRIVILEGE_HINT}")
        raise UserError(f"the probe does not run{where or ' here'} ({r.stderr.strip() or r.returncode}): "
                        "is the target's architecture one rtforge builds for?")
    if r.returncode:
        return None
    try:
        return json.loads(meta)
    except ValueError:
        return None


def _config(spec: LatencySpec, target: RunSite, cpus: list[int], emulated: bool) -> dict:
    cfg = {
        "interval_us": spec.interval_us, "priority": spec.priority, "policy": spec.policy, "cpus": cpus,
        "loads": spec.loads, "spike_threshold_ns": spec.spike_threshold_ns, "checkpoint_s": spec.checkpoint_s,
        "settle_s": spec.settle,
    }
    if spec.engine == "probe":
        cfg["phase"] = spec.phase
    else:
        cfg["histogram_us"] = spec.cyclictest_histogram_us
    if not target.local:
        cfg["board"] = {"destination": target.transport.name, "dir": f"{target.base}/runs",
                        "net_from_host": "net" in spec.loads}
    if spec.trace:
        cfg["trace"] = True
    if emulated:
        cfg["emulated"] = True
    return cfg


def prepare(target: RunSite, tools: dict, install: bool, on_step: Callable[[str], None],
            optional: tuple[str, ...] = (), trace: bool = False) -> Contact:
    """First contact, the kernel's tracer (--trace: before the tools, as
    a missing tracer needs another kernel, not a package), tools (and
    whether the optional ones are there) and the one-run-per-target rule."""
    on_step(f"connecting to {target.transport.name}" if not target.local else "checking this machine")
    # whether it is measuring already, asked with the facts (one round trip): before anything is uploaded
    # A board's folder is made (or checked) root's own here, before anything is
    # uploaded into it or run from it; a login that is not root asks through sudo.
    busy = script_argv("busy", target.base) if target.local else as_root(script_argv("busy", target.base, "make"))
    contact = first_contact(target, [*tools, *optional], then=busy)
    if contact.then_status == safesh.OWNED_STATUS:  # refused: ask again for the sentence that says why
        busy_with(target.transport, target.base)
    if trace:
        support = tracing.detect(target.transport, sudo=not target.local and not contact.is_root)
        tracing.require(support, target.where, contact.is_root or not target.local)
    check_tools(tools, target, contact, install, on_step)
    # after an install (minutes, perhaps), ask again
    owner = busy_with(target.transport, target.base) if install else contact.then.strip()
    if owner:
        raise busy_error(target, owner)
    return contact


def start_run(spec: LatencySpec, store: Store, transport: Transport | None = None, *, install: bool = False,
              detach: bool = False, base: str | None = None, machine: str | None = None,
              probe_prefix: tuple[str, ...] = (), on_step: Callable[[str], None] | None = None,
              on_launch: Callable[[Runner], None] | None = None) -> Started:
    """Check, stage and start a latency run on this machine (no transport)
    or a board; returns once it measures.  machine/probe_prefix run another
    architecture's probe through an interpreter (tests: qemu-aarch64-static)."""
    step = on_step or (lambda s: None)
    target = make_target(store, transport, base)
    spec.validate(None)
    if not target.local and detach and set(spec.loads) & set(HOST_LOADS):
        raise UserError("the net load floods the board from this machine, so it cannot run with --detach: "
                        "drop --detach (the run still survives a dropped connection) or drop 'net'")
    flood = HostFlood("127.0.0.1", None) if not target.local and "net" in spec.loads else None
    if flood:
        flood.check()
    if target.local:
        check_privileges(target_loads(spec.loads, target), target.transport)
    contact = prepare(target, tools_for(spec.engine, spec.loads, target, spec.trace), install, step,
                      trace=spec.trace)
    spec.validate(set(contact.cpus), target.where, target.whose)
    cpus = sorted(spec.cpus) if spec.cpus is not None else contact.cpus
    arch = machine or contact.machine
    step(f"building the probe for {arch}")
    # a board's libraries may differ from ours: static for any board
    probe_local = build_probe(None if target.local and not machine else arch, static=None if target.local else True)

    now = datetime.now(UTC)
    run_id = store.new_run_id(contact.hostname, now)
    d = f"{target.base}/runs/{run_id}"
    engine = engine_command(spec, f"{d}/rtprobe", f"{d}/raw", cpus, probe_prefix)
    result = RunResult(
        run_id=run_id, engine=spec.engine, state="running", host=contact.hostname,
        start_time=now.isoformat(timespec="seconds"), label=spec.label,
        requested={"duration_s": None if spec.loops else spec.duration_s, "loops": spec.loops},
        config=_config(spec, target, cpus, emulated=bool(probe_prefix)),
        reproducer=spec.reproducer(None if target.local else target.transport.name), engine_argv=engine.argv,
    )
    loads = load_commands(target_loads(spec.loads, target), ncpus=contact.ncpus,
                          deadline_s=deadline_for(spec.expected_s, spec.settle), tmpdir=f"{d}/tmp")
    if flood:  # from before the settle time on, like the board's own loads
        flood = HostFlood(contact.address, spec.settle + (spec.expected_s or 0) if spec.expected_s else None)
        flood.start()
    try:
        run, word = launch(target, contact, store, result, engine, {"rtprobe": probe_local}, loads=loads,
                           settle_s=spec.settle, probe_prefix=probe_prefix, on_step=step, on_launch=on_launch)
    except BaseException:
        if flood:
            with held_signals():
                flood.stop()
        raise
    # "running": the engine started a moment ago (the runner answers once it has)
    first = Poll("running", "", True, 0.0) if word == "running" else None
    return Started(run, target, contact.address, spec.expected_s, spec.loads, result, flood, first)
