# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)
# Made by `make collection` from rtforge's src/rtforge/data/latency_options.toml: edit that file,
# then make this one again (a test fails while they differ).
"""The options of rtforge latency that the rtforge.rtforge.latency module passes on, and its
own patience: extends_documentation_fragment: rtforge.rtforge.latency."""


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  duration:
    description:
      - "How long each run measures: 90s, 10m, 2h, 1h30m, up to 100d."
      - "Not given, rtforge's default: C(60s)."
      - "Passed to C(rtforge latency) as C(--duration); left out of a task, the host's C(rtforge_duration)."
    type: str
  loops:
    description:
      - "Stop after this many wake-ups per CPU instead."
      - "Passed to C(rtforge latency) as C(--loops); left out of a task, the host's C(rtforge_loops)."
    type: int
  interval_us:
    description:
      - "Wake-up period in µs, 10 to 10 000 000."
      - "Not given, rtforge's default: C(200)."
      - "Passed to C(rtforge latency) as C(--interval-us); left out of a task, the host's
        C(rtforge_interval_us)."
    type: int
  priority:
    description:
      - "SCHED_FIFO priority of the measuring threads, 1 to 99."
      - "Not given, rtforge's default: C(90)."
      - "Passed to C(rtforge latency) as C(--priority); left out of a task, the host's C(rtforge_priority)."
    type: int
  policy:
    description:
      - "Scheduling policy of the measuring threads: fifo or rr."
      - "Not given, rtforge's default: C(fifo)."
      - "Passed to C(rtforge latency) as C(--policy); left out of a task, the host's C(rtforge_policy)."
    type: str
  cpus:
    description:
      - "CPUs to measure, e.g. 0-3,6."
      - "Not given, rtforge's default: all."
      - "Passed to C(rtforge latency) as C(--cpus); left out of a task, the host's C(rtforge_cpus)."
    type: str
  load:
    description:
      - "Comma-separated loads to measure under: cpu, vm, io, net, hackbench, zero."
      - "Not given, rtforge's default: none."
      - "Passed to C(rtforge latency) as C(--load); left out of a task, the host's C(rtforge_load)."
    type: str
  engine:
    description:
      - "What measures: probe or cyclictest."
      - "Not given, rtforge's default: C(probe)."
      - "Passed to C(rtforge latency) as C(--engine); left out of a task, the host's C(rtforge_engine)."
    type: str
  phase:
    description:
      - "Probe: CPUs woken nearly at once, as cyclictest's are, or spread evenly over the period: together or
        spread."
      - "Not given, rtforge's default: C(together)."
      - "Passed to C(rtforge latency) as C(--phase); left out of a task, the host's C(rtforge_phase)."
    type: str
  spike_us:
    description:
      - "Log the wake-ups later than this many µs."
      - "Not given, rtforge's default: half the interval."
      - "Passed to C(rtforge latency) as C(--spike-us); left out of a task, the host's C(rtforge_spike_us)."
    type: float
  histogram_us:
    description:
      - "The histogram range of cyclictest, in µs, 10 to 1 000 000."
      - "Not given, rtforge's default: 10 intervals, at least 1000."
      - "Passed to C(rtforge latency) as C(--histogram-us); left out of a task, the host's
        C(rtforge_histogram_us)."
    type: int
  settle_s:
    description:
      - "Seconds the loads get to start before measuring."
      - "Not given, rtforge's default: 3 with loads."
      - "Passed to C(rtforge latency) as C(--settle-s); left out of a task, the host's C(rtforge_settle_s)."
    type: float
  trace:
    description:
      - "Also record why spikes were late: rtla timerlat's auto-analysis at the spike threshold (needs
        CONFIG_TIMERLAT_TRACER and rtla)."
      - "Passed to C(rtforge latency) as C(--trace); left out of a task, the host's C(rtforge_trace)."
    type: bool
    default: false
  install:
    description:
      - "Install the tools missing on the board with apt-get (sudo)."
      - "Passed to C(rtforge latency) as C(--install); left out of a task, the host's C(rtforge_install)."
    type: bool
    default: false
  patience:
    description:
      - "How long beyond a run's own length a board is waited for (its start, a drop); then its run goes on
        there alone."
      - "Left out of a task, the host's C(rtforge_patience)."
    type: str
    default: "5m"
"""
