"""One latency run, from checks to the stored result.

Order matters and is the point of this module:
  1. check everything that can be checked (arguments, tools, privileges)
     before anything starts or is written: bad input leaves no trace;
  2. store the run with its metadata *before* measuring, so a crash keeps it;
  3. loads start, then the engine; the engine stops, then the loads, on
     every path (Ctrl-C, SIGTERM, an exception), with further signals held
     off while cleaning up so a second Ctrl-C cannot orphan a load;
  4. whatever was measured is finalized and stored, marked partial when the
     run did not run its course.
"""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from .. import procfs
from ..errors import UserError
from ..results.collect import finalize
from ..results.model import RunResult
from ..results.store import Store
from ..results.system import describe
from ..target import LocalTransport, Transport
from .engines import make_engine
from .loads import LoadSet, deadline_for
from .probebuild import build_probe
from .spec import LatencySpec, available_cpus

POLL_S = 0.5


@dataclass
class Progress:
    elapsed_s: float
    total_s: float | None
    max_ns: dict[int, int] = field(default_factory=dict)


@contextmanager
def held_signals():
    """Ignore SIGINT/SIGTERM while cleaning up: we are already stopping, and
    a second Ctrl-C must not cut the cleanup short.  Only the main thread
    may set handlers; elsewhere this does nothing."""
    try:
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _config(spec: LatencySpec, loads: LoadSet) -> dict:
    cfg = {
        "interval_us": spec.interval_us,
        "priority": spec.priority,
        "policy": spec.policy,
        "cpus": spec.cpus if spec.cpus is not None else sorted(available_cpus()),
        "loads": loads.names,
        "spike_threshold_ns": round(spec.spike_us * 1000) if spec.spike_us is not None else spec.interval_us * 500,
        "checkpoint_s": spec.checkpoint_s,
    }
    if spec.engine == "cyclictest":
        cfg["histogram_us"] = spec.cyclictest_histogram_us
    return cfg


def run_latency(
    spec: LatencySpec,
    store: Store,
    *,
    transport: Transport | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> RunResult:
    transport = transport or LocalTransport()
    spec.validate(available_cpus())
    probe = build_probe()
    loads = LoadSet(spec.loads, transport, ncpus=os.cpu_count() or 1, deadline_s=deadline_for(spec.expected_s))
    loads.check()
    engine = make_engine(spec, transport, probe)
    engine.check()

    meta = transport.run([str(probe), "--meta"])
    if meta.returncode:
        raise RuntimeError(f"rtprobe --meta failed: {meta.stderr.strip()}")
    system = describe(json.loads(meta.stdout))
    now = datetime.now(timezone.utc)
    host = system.get("hostname") or "localhost"
    result = RunResult(
        run_id=store.new_run_id(host, now), engine=spec.engine, state="running", host=host,
        start_time=now.isoformat(timespec="seconds"), label=spec.label,
        requested={"duration_s": spec.duration_s, "loops": spec.loops},
        config=_config(spec, loads), system=system, reproducer=spec.reproducer(),
        owner={"pid": os.getpid(), "start_ticks": procfs.start_ticks(os.getpid())},
    )
    run_dir = store.run_dir(result.run_id)
    raw = run_dir / "raw"
    raw.mkdir(parents=True)
    result.engine_argv = engine.argv(raw)
    store.save(result)

    started = False
    end_reason = None
    t0 = time.monotonic()
    try:
        try:
            loads.start(raw / "loads.log")
            engine.start(raw)
            started = True
            t0 = time.monotonic()
            while engine.poll() is None:
                elapsed = time.monotonic() - t0
                loads.poll(elapsed)
                if on_progress:
                    on_progress(Progress(elapsed, spec.expected_s, dict(engine.progress(raw))))
                time.sleep(POLL_S)
        except KeyboardInterrupt as e:
            end_reason = str(e) or "SIGINT"
        finally:
            with held_signals():
                engine.stop()
                loads.stop()
        engine.raise_for_status(raw)
    except BaseException:
        with held_signals():
            if started:
                _keep_failed(result, store)
            else:  # nothing was measured: leave no trace
                store.delete(result.run_id)
        raise

    result.duration_s = time.monotonic() - t0
    finalize(result, run_dir, state="interrupted" if end_reason else None, end_reason=end_reason)
    result.warnings += loads.events
    store.save(result)
    return result


def _keep_failed(result: RunResult, store: Store) -> None:
    try:
        finalize(result, store.run_dir(result.run_id), state="failed", end_reason="error")
    except (UserError, OSError, ValueError, KeyError):
        result.state, result.owner = "failed", None
    store.save(result)
