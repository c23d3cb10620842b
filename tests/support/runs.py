"""Runs built by hand, for tests whose truth is worked out on paper: every
count, maximum and overrun is chosen, so the expected verdict, table or
plot follows from the numbers written here, not from rtforge's code."""

from __future__ import annotations

from rtforge.results.hist import Histogram
from rtforge.results.model import CpuResult, RunResult
from rtforge.results.store.runstore import Store

from .nqueens import A000170


def us_cpu(cpu: int, counts_by_us: dict[int, int], *, overflow: int = 0, max_us: int | None = None,
           range_us: int | None = None, overruns: int | None = None) -> CpuResult:
    """A CPU whose wake-ups sit on whole microseconds, as the importers store
    cyclictest's buckets: counts_by_us {latency µs: wake-ups}; overflow
    wake-ups beyond a histogram of range_us buckets (cyclictest -h range_us);
    max_us=-1 for a run whose maximum nobody recorded."""
    buckets = [[k * 1000, k * 1000, n] for k, n in sorted(counts_by_us.items())]
    n = sum(counts_by_us.values()) + overflow
    top = max_us if max_us is not None else max(counts_by_us)
    return CpuResult(
        cpu=cpu, count=n, min_ns=min(counts_by_us) * 1000, max_ns=None if max_us == -1 else top * 1000,
        sum_ns=sum(k * 1000 * c for k, c in counts_by_us.items()) if not overflow else None, overruns=overruns,
        hist=Histogram.from_buckets(buckets, overflow, (range_us - 1) * 1000 if range_us else None),
    )


def run(cpus: list[CpuResult], *, label: str = "run", run_id: str = "20260101-000000-pi-0001",
        state: str = "complete", interval_us: int = 200, duration_s: float = 7200.0, **kw) -> RunResult:
    config = {"interval_us": interval_us, "priority": 90, "policy": "fifo", "loads": ["cpu"],
              "cpus": [c.cpu for c in cpus], **kw.pop("config", {})}
    args = dict(run_id=run_id, engine="probe", state=state, host="pi", start_time="2026-01-01T00:00:00+00:00",
                label=label, duration_s=duration_s, config=config,
                system={"kernel_release": "6.12.0-rt", "preempt_model": "rt"}, cpus=cpus)
    args.update(kw)
    return RunResult(**args)


def bench_run(
    store: Store,
    label: str,
    medians_s: dict[int, float],
    ops: dict[int, float] | None = None,
    n: int = 12,
    preempt: str = "rt",
) -> RunResult:
    """A bench run whose 5 solve times per thread count have the given median."""
    nq = [
        {
            "threads": t,
            "solutions": A000170[n - 1],
            "warmup_elapsed_ns": [],
            "elapsed_ns": [round(m * 1e9 * f) for f in (1.02, 0.97, 1.0, 1.05, 0.99)],
            "cpu_ns": [round(m * 1e9 * t * 0.98)] * 5,
        }
        for t, m in medians_s.items()
    ]
    stress = (
        {
            "version": "0.15.06",
            "method": "matrixprod",
            "duration_s": 10,
            "runs": [
                {
                    "threads": t,
                    "bogo_ops": round(v * 10),
                    "real_s": 10.0,
                    "usr_s": 10.0 * t,
                    "sys_s": 0.0,
                    "bogo_ops_per_s": v,
                    "bogo_ops_per_cpu_s": v / t,
                }
                for t, v in ops.items()
            ],
        }
        if ops
        else None
    )
    r = RunResult(
        run_id=store.new_run_id("pi4"),
        engine="nqueens",
        state="complete",
        host="pi4",
        start_time="2026-01-01T00:00:00+00:00",
        kind="bench",
        label=label,
        duration_s=600.0,
        config={"n": n, "threads": list(medians_s)},
        system={"kernel_release": "6.12.0", "preempt_model": preempt},
        bench={
            "benchmark": "nqueens",
            "n": n,
            "solutions_expected": A000170[n - 1],
            "repeat": 5,
            "warmup": 1,
            "nqueens": nq,
            "stress_ng": stress,
        },
    )
    store.save(r)
    return r


def left_in(runs_dir) -> list[str]:
    """What a store's runs/ holds beyond its scratch (runs/.tmp, where imports
    are built and deleted runs go), and whatever the scratch still holds."""
    if not runs_dir.is_dir():
        return []
    names = sorted(p.name for p in runs_dir.iterdir() if p.name != ".tmp")
    scratch = runs_dir / ".tmp"
    return names + (sorted(f".tmp/{p.name}" for p in scratch.iterdir()) if scratch.is_dir() else [])


def copies(store: Store, run_id: str, n: int, *, hosts=("pi4-lab",), kernels=("6.12.25-rt8-v8+",),
           label_every: int = 0) -> list[str]:
    """n copies of a stored run's folder under new ids, as a store filled over
    months holds them: one every 90 minutes from 2026-01-01, hosts and kernels
    in turn, a label ("batch K") on every label_every-th; each a run of its own
    (its own source sha256).  Their ids, oldest first.  The index is not told:
    the next command finds them, as it finds folders copied in by hand."""
    import hashlib
    import json
    import shutil
    from datetime import UTC, datetime, timedelta

    src = store.run_dir(run_id)
    doc = json.loads((src / "result.json").read_text())
    ids = []
    for i in range(n):
        when = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=90 * i)
        host = hosts[i % len(hosts)]
        new = f"{when:%Y%m%d-%H%M%S}-{host}-{i:04x}"
        doc.update(run_id=new, host=host, start_time=when.isoformat(timespec="seconds"),
                   stored_at=(when + timedelta(minutes=1)).isoformat(timespec="microseconds"),
                   label=f"batch {i // label_every}" if label_every and i % label_every == 0 else None)
        doc["system"] = {**doc["system"], "kernel_release": kernels[i % len(kernels)]}
        doc["source"] = {**(doc.get("source") or {}), "sha256": hashlib.sha256(new.encode()).hexdigest()}
        shutil.copytree(src / "raw", store.runs_dir / new / "raw")
        (store.runs_dir / new / "result.json").write_text(json.dumps(doc))
        ids.append(new)
    return ids
