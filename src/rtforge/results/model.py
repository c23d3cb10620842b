"""The result of one run, as stored in ``<run dir>/result.json``.

Raw histograms are stored; every statistic is derived from them
(``results.stats``).  Metadata is written before a run starts, so a run
that dies still has it.

Format history (bump FORMAT_VERSION and add a line whenever a field is added,
removed or changes meaning; ``from_dict`` must keep reading every version):

  1  2026-11  first version: latency runs from the probe and cyclictest.
  2  2026-11  `bench`: CPU benchmark runs (kind "bench", `rtforge bench cpu`):
              raw N-queens solve times per thread count and stress-ng
              metrics (results/bench/summary.py); None for latency runs.
              Version 1 files read as runs without it.
  3  2026-11  `stored_at`: when the run entered the store (ISO 8601, UTC, µs),
              set by the store; `last` means the run stored last.  Older
              files read with None and are ordered by their start time.
  4  2026-11  `trace` (latency --trace): rtla timerlat's auto-analysis, one
              record per analysed spike with `culprit`, the line shown for
              it (results/raw/rtla_analysis.py); None without --trace.
              `series` gains per-CPU `irqs` and `irq_thread_pct`,
              `irq_thread_top`, `irq_thread_top_pct` (raw/probe.py).  Older
              files read with None / without them.
  5  2026-11  `cpus[].hist.overflow` may be null: the file a run was imported
              from does not say how many samples fell beyond its histogram
              (the blog CSV); its percentiles are then lower bounds.
              Older files always hold a count.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UserError
from .hist import Histogram
from .schema import Damaged, check_result

FORMAT_VERSION = 5
MAX_LABEL = 200   # characters of a run's label: a name to type and to show in a table, not a note


@dataclass
class CpuResult:
    cpu: int
    count: int                    # wake-ups measured, including histogram overflow
    min_ns: int | None
    max_ns: int | None            # exact (probe) or the engine's own max (cyclictest)
    sum_ns: int | None            # for the average; None when the engine gave none
    overruns: int | None          # whole periods missed; None = engine cannot tell
    hist: Histogram
    spikes: int | None = None     # wake-ups above the spike threshold
    spikes_dropped: int = 0       # spikes counted but not logged (ring full)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "hist"}
        d["hist"] = {
            "buckets": self.hist.to_buckets(),
            "overflow": self.hist.overflow if self.hist.overflow_known else None,
            "range_max_ns": self.hist.range_max_ns,
        }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CpuResult:
        h = d["hist"]
        overflow = h.get("overflow", 0)
        hist = Histogram.from_buckets(h["buckets"], overflow or 0, h.get("range_max_ns"),
                                      overflow_known=overflow is not None)
        fields: dict[str, Any] = {k: d.get(k) for k in ("cpu", "count", "min_ns", "max_ns", "sum_ns", "overruns",
                                                          "spikes")}
        return cls(hist=hist, spikes_dropped=d.get("spikes_dropped", 0), **fields)


@dataclass
class RunResult:
    run_id: str
    engine: str                   # probe | cyclictest | import | nqueens (bench runs)
    state: str                    # running | complete | interrupted | killed | failed
    host: str
    start_time: str               # ISO 8601, UTC
    kind: str = "latency"         # latency | bench
    label: str | None = None
    end_reason: str | None = None
    duration_s: float | None = None
    requested: dict[str, Any] = field(default_factory=dict)   # duration_s, loops
    config: dict[str, Any] = field(default_factory=dict)      # interval_us, priority, policy, cpus, loads...
    system: dict[str, Any] = field(default_factory=dict)      # what the probe's --meta collected (+ derived)
    reproducer: str | None = None                            # the rtforge command that repeats this run
    engine_argv: list[str] = field(default_factory=list)     # the exact engine command
    cpus: list[CpuResult] = field(default_factory=list)
    series: dict[str, Any] | None = None                     # per-second per-CPU max/count
    telemetry: dict[str, Any] | None = None                  # temperature, frequency, throttling
    top_spikes: list[list[int]] = field(default_factory=list)  # [cpu, t_ns, lat_ns], largest first
    warnings: list[str] = field(default_factory=list)
    source: dict[str, Any] | None = None                     # imports: file name and sha256
    owner: dict[str, Any] | None = None                      # while running: pid + start ticks
    bench: dict[str, Any] | None = None                      # kind "bench": raw benchmark results
    stored_at: str | None = None                             # set by the store when first saved
    trace: dict[str, Any] | None = None                      # --trace: analysed spikes (raw/rtla_analysis.py)
    format_version: int = FORMAT_VERSION

    @property
    def partial(self) -> bool:
        """Not a whole run: stopped early, killed, or still running."""
        return self.state != "complete"

    @property
    def max_ns(self) -> int | None:
        maxes = [c.max_ns for c in self.cpus if c.max_ns is not None]
        return max(maxes) if maxes else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpus"] = [c.to_dict() for c in self.cpus]
        d["partial"] = self.partial  # derived, stored for readers without rtforge
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        """The result a dict describes; Damaged (a ValueError) when its shape is
        wrong, UserError when a newer rtforge wrote it."""
        if not isinstance(d, dict):
            raise Damaged(f"it holds {type(d).__name__}, not a result object")
        version = d.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise Damaged(f"its format_version is {version!r}, not a version number")
        if version > FORMAT_VERSION:
            raise UserError(
                f"result format version {version!r} is newer than this rtforge understands "
                f"({FORMAT_VERSION}); upgrade rtforge"
            )
        check_result(d)
        known = set(cls.__dataclass_fields__)
        args = {k: v for k, v in d.items() if k in known and k != "cpus"}
        args["cpus"] = [CpuResult.from_dict(c) for c in d.get("cpus", [])]
        # In memory a result is always of the current version: saved again, it says so.
        args["format_version"] = FORMAT_VERSION
        return cls(**args)
