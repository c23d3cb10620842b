"""One latency run, from the checks to the stored result, on this machine
or on a board -- the library API behind `rtforge latency`, `attach` and
`--stop`:

    run_latency(LatencySpec(duration_s=600, loads=["cpu", "io"]), Store())            # here
    run_latency(spec, Store(), SshTransport("pi@raspberrypi.local"))                  # on a board

Both go through the same lifecycle (launch.start_run, then follow, then
collect) and the same runner on the target, so both survive a killed
rtforge and can be followed again (`attach`), ended (`stop`) or, on a
board, brought in once they ended (`fetch_runs`: `rtforge fetch`).  What
differs is what Ctrl-C means: here it ends the run and keeps what was
measured (the user sits at the machine being measured); on a board it only
lets go of the run (LetGo), which goes on -- ending it is a deliberate
`stop`.  A board's net load floods it from this host while rtforge follows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..device import ConnectionLost, LocalTransport, Transport
from ..errors import UserError
from ..results.model import RunResult
from ..results.store.runstore import Store
from ..signals import held_signals
from .launch import Started, start_run
from .loads import HostFlood
from .runner import BASE_DIR, NothingMeasured, Poll, Runner, list_runs, resolve_run
from .spec import LatencySpec, expected_s
from .target import make_target

# A board: one poll costs it ~5 ms of CPU (sshd's channel, the runner's
# status, one tail; bench/remote_overhead.py), so every 5 s stays well under
# 0.5 % of one CPU even on a board a few times slower.  This machine: no
# ssh, one small sh every 2 s (~0.4 s of CPU a minute here, bench/remote_overhead.py).
# Between polls the display's clock runs on.
BOARD_POLL_S = 5.0
LOCAL_POLL_S = 2.0
TICK_S = 0.5
STOP_TIMEOUT_S = 60.0   # the engine ends within a second, the loads within 5 s


@dataclass
class Progress:
    elapsed_s: float
    total_s: float | None
    max_ns: dict[int, int] = field(default_factory=dict)
    state: str = "running"      # settling while the loads start
    steps: int = 0              # benchmarks: steps done


class LetGo(KeyboardInterrupt):
    """Ctrl-C while following a board's run: rtforge let go, the run goes on."""

    def __init__(self, run_id: str, where: str):
        super().__init__("let go")
        self.run_id, self.where = run_id, where


def follow(run: Runner, expected: float | None, *, poll_s: float,
           on_progress: Callable[[Progress], None] | None = None,
           on_connection: Callable[[str | None], None] | None = None,
           flood: HostFlood | None = None, first: Poll | None = None) -> Poll:
    """Poll until the runner is gone; its last answer.  A lost connection is reported
    through on_connection(message) and retried; on_connection(None) when it is back.
    first: an answer already known (the start's), used instead of the first poll."""
    lost = False
    while True:
        try:
            if first is not None:
                p, first = first, None
            else:
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
        if not p.alive and p.state not in ("starting",):
            if on_progress and p.elapsed_s is not None:
                on_progress(Progress(p.elapsed_s, expected, p.max_ns, p.state, p.steps))
            return p
        _until_next(p, _wait_s(p, poll_s, expected), expected, on_progress)


def _wait_s(p: Poll, poll_s: float, expected: float | None) -> float:
    """How long until the next poll."""
    if p.final or p.state == "stopping":
        # the runner has said its last word (or was told to) and is exiting: its end is a tick away,
        # not a poll (a fleet waited 5 s more for one board whose poll caught "done" a moment early)
        return TICK_S
    if expected and p.elapsed_s is not None and p.state == "running":
        # near the end, look more often: the run is stored as soon as it ended
        return min(poll_s, max(TICK_S, expected - p.elapsed_s + TICK_S))
    return poll_s


def _until_next(p: Poll, wait_s: float, expected: float | None,
                on_progress: Callable[[Progress], None] | None) -> None:
    """Wait for the next poll, the progress line moving meanwhile."""
    polled = time.monotonic()
    while (waited := time.monotonic() - polled) < wait_s:
        if on_progress:
            guess = (p.elapsed_s + waited) if p.elapsed_s is not None else 0.0
            on_progress(Progress(min(guess, expected) if expected else guess, expected, p.max_ns, p.state, p.steps))
        time.sleep(min(TICK_S, wait_s - waited))


def collect(run: Runner, store: Store, keep_empty: bool = False, last: Poll | None = None) -> RunResult:
    """Bring a run whose runner is gone into the store: a board's is fetched
    (verified) and then removed there; this machine's is finished in its
    store folder.  A killed runner's leftovers are ended and the run marked
    killed first.  last: follow()'s last answer (the runner gone), so it is not asked again."""
    if run.in_store(store):
        stored = store.load(run.run_id)
        if stored.state != "running":  # another rtforge (or `runs`) finished it already
            return stored
    p = last if last is not None and not last.alive else run.poll(progress=False)
    if p.alive:
        where = "" if run.in_store(store) else f" {run.t.name}"
        raise UserError(f"run {run.run_id} is still running: follow it with `rtforge attach{where} {run.run_id}` "
                        f"or end it with `rtforge latency{where} --stop {run.run_id}`")
    if not p.final:
        run.reap()
    if run.in_store(store):
        return run.finish(store, keep_empty=keep_empty)
    try:
        result = run.fetch(store)
    except NothingMeasured:
        run.remove()
        raise
    run.remove()  # only now: the store holds a verified copy
    return result


def stop_run(run: Runner, signal_name: str = "TERM", *, timeout_s: float = STOP_TIMEOUT_S,
             poll_s: float = 0.2) -> None:
    """End a run cleanly (the runner stops the engine, then the loads) and
    wait until the runner is gone.  A runner still starting is waited for."""
    deadline = time.monotonic() + timeout_s
    while not run.stop(signal_name):
        p = run.poll(progress=False)
        if p.state != "starting" or p.alive or time.monotonic() > deadline:
            break
        time.sleep(poll_s)  # launched but not yet recorded: ask again
    while run.poll(progress=False).alive:
        if time.monotonic() > deadline:
            raise UserError(f"run {run.run_id} on {run.t.name} did not stop within {timeout_s:.0f} s: "
                            "look at it (`ps -ef | grep -e rtprobe -e cyclictest`)")
        time.sleep(poll_s)


def _end_here(run: Runner, store: Store, signal_name: str, state: str | None = None,
              end_reason: str | None = None) -> RunResult | None:
    """Stop a run of this machine and keep what it measured (None: nothing)."""
    with held_signals():
        stop_run(run, signal_name)
        try:
            result = collect(run, store, keep_empty=state is None)   # a Ctrl-C keeps even an empty run
        except NothingMeasured:
            return None
        if state:
            result.state, result.end_reason = state, end_reason
            store.save(result)
        return result


def run_latency(spec: LatencySpec, store: Store, transport: Transport | None = None, *, install: bool = False,
                poll_s: float | None = None, on_step: Callable[[str], None] | None = None,
                on_progress: Callable[[Progress], None] | None = None,
                on_connection: Callable[[str | None], None] | None = None,
                on_launch: Callable[[Runner], None] | None = None, **start_kw) -> RunResult:
    """Measure, follow and store one run; returns the stored result (state
    "interrupted" after Ctrl-C here).  On a board, Ctrl-C raises LetGo."""
    launched: list[Runner] = []

    def _launched(run: Runner) -> None:
        if on_launch:
            on_launch(run)
        launched.append(run)

    local = transport is None or (isinstance(transport, LocalTransport) and start_kw.get("base") is None)
    try:
        started = start_run(spec, store, transport, install=install, on_step=on_step, on_launch=_launched,
                            **start_kw)
    except KeyboardInterrupt as e:
        if launched and local:  # the runner may be going: end it, keep what it measured
            if (result := _end_here(launched[0], store, _signal(e))) is not None:
                return result
        elif launched:
            raise LetGo(launched[0].run_id, launched[0].t.name) from None
        raise
    return _follow_and_collect(started, store, poll_s or (LOCAL_POLL_S if local else BOARD_POLL_S),
                               on_progress, on_connection)


def _signal(e: BaseException) -> str:
    return "TERM" if str(e) == "SIGTERM" else "INT"


def _follow_and_collect(started: Started, store: Store, poll_s: float, on_progress, on_connection,
                        stop_signal: str | None = None) -> RunResult:
    run, local = started.run, started.target.local
    try:
        last = follow(run, started.expected_s, poll_s=poll_s, on_progress=on_progress, on_connection=on_connection,
                      flood=started.flood, first=started.first)
    except KeyboardInterrupt as e:
        if not local:
            raise LetGo(run.run_id, run.t.name) from None
        result = _end_here(run, store, stop_signal or _signal(e))
        if result is None:
            raise
        return result
    except BaseException:
        if local:  # an error here must not leave the run going: end it, keep it marked failed
            _end_here(run, store, stop_signal or "TERM", state="failed", end_reason="error")
        raise
    finally:
        if started.flood:
            with held_signals():
                started.flood.stop()
    result = collect(run, store, last=last)
    if started.flood and started.flood.events:
        result.warnings += started.flood.events
        store.save(result)
    return result


def open_run(ref: str, store: Store, transport: Transport | None = None) -> Runner:
    """A handle on a run by id or unique prefix: this machine's in the store,
    a board's among the runs there."""
    target = make_target(store, transport)
    if target.local:
        run_id = store.resolve(ref)
        return Runner(target.transport, run_id, base=target.base)
    return Runner(target.transport, resolve_run(target.transport, ref, target.base), base=target.base)


def attach(ref: str, store: Store, transport: Transport | None = None, *, poll_s: float | None = None,
           on_progress: Callable[[Progress], None] | None = None,
           on_connection: Callable[[str | None], None] | None = None) -> RunResult:
    """Follow a run again until it ends, then store it.  Ctrl-C lets go of
    it (LetGo), here too: it was detached on purpose."""
    run = open_run(ref, store, transport)
    local = run.in_store(store)
    if local and store.load(run.run_id).state != "running":
        return store.load(run.run_id)
    doc = run.read_json()
    flood = None
    if not local and "net" in ((doc.get("config") or {}).get("loads") or []) and run.poll(progress=False).alive:
        address = run.t.run(["sh", "-c", 'set -- ${SSH_CONNECTION:-}; echo "${3:-}"']).stdout.strip()
        flood = HostFlood(address, _expected_s(doc))
        try:
            flood.check()
            flood.start()
        except UserError as e:
            flood = None
            if on_connection:
                on_connection(f"the net load cannot run from here ({e}); following without it")
    target = make_target(store, None if local else transport)
    started = Started(run, target, "", _expected_s(doc), [], RunResult.from_dict(doc), flood)
    try:
        return _follow_and_collect(started, store, poll_s or (LOCAL_POLL_S if local else BOARD_POLL_S),
                                   on_progress, on_connection)
    except KeyboardInterrupt:
        raise LetGo(run.run_id, run.t.name) from None


def stop(ref: str, store: Store, transport: Transport | None = None, signal_name: str = "TERM") -> RunResult:
    """End a run cleanly and store it."""
    run = open_run(ref, store, transport)
    if run.in_store(store) and store.load(run.run_id).state != "running":
        return store.load(run.run_id)
    stop_run(run, signal_name)
    return collect(run, store)


@dataclass
class Fetched:
    """What fetch_runs did on a board."""
    results: list[RunResult] = field(default_factory=list)   # stored, and removed from the board
    running: list[str] = field(default_factory=list)         # still measuring there: `attach` follows them
    empty: list[str] = field(default_factory=list)           # why each run that measured nothing was removed


def fetch_runs(store: Store, transport: Transport, ref: str | None = None, *, base: str = BASE_DIR) -> Fetched:
    """Bring a board's runs that ended into the store, each through collect
    (verified, then removed there): the one named by ref (id or prefix),
    else every run whose runner is gone.  A run that measured nothing is
    removed and said in Fetched.empty -- or, when it is the one asked for,
    raised as NothingMeasured."""
    done = Fetched()
    if ref is not None:
        done.results.append(collect(Runner(transport, resolve_run(transport, ref, base), base=base), store))
        return done
    for info in list_runs(transport, base):
        if info.alive:
            done.running.append(info.run_id)
            continue
        # the listing's answer is the run's last poll: its runner is gone, so it cannot change
        last = Poll(info.state, info.detail, False, None)
        try:
            done.results.append(collect(Runner(transport, info.run_id, base=base), store, last=last))
        except NothingMeasured as e:
            done.empty.append(str(e))
    return done


def _expected_s(doc: dict) -> float | None:
    """How long a run should take, from its description."""
    req, cfg = doc.get("requested") or {}, doc.get("config") or {}
    return expected_s(req.get("loops"), req.get("duration_s"), cfg.get("interval_us"))
