"""Runs built by hand, for tests whose truth is worked out on paper: every
count, maximum and overrun is chosen, so the expected verdict, table or
plot follows from the numbers written here, not from rtforge's code."""

from __future__ import annotations

from rtforge.results.hist import Histogram
from rtforge.results.model import CpuResult, RunResult
from rtforge.results.store import Store

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
