# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)
# Made by `make collection` from rtforge's src/rtforge/data/latency_options.toml: edit that file,
# then make this one again (a test fails while they differ).
"""The options of rtforge latency as the latency module takes them (its own patience too)."""

# option -> its argument spec
ARGUMENT_SPEC = {
    'duration': {'type': 'str'},
    'loops': {'type': 'int'},
    'interval_us': {'type': 'int'},
    'priority': {'type': 'int'},
    'policy': {'type': 'str'},
    'cpus': {'type': 'str'},
    'load': {'type': 'str'},
    'engine': {'type': 'str'},
    'phase': {'type': 'str'},
    'spike_us': {'type': 'float'},
    'histogram_us': {'type': 'int'},
    'settle_s': {'type': 'float'},
    'trace': {'type': 'bool', 'default': False},
    'install': {'type': 'bool', 'default': False},
    'patience': {'type': 'str', 'default': '5m'},
}

# option -> the host variable that gives it when a task leaves it out
FROM_VARS = {
    'duration': 'rtforge_duration',
    'loops': 'rtforge_loops',
    'interval_us': 'rtforge_interval_us',
    'priority': 'rtforge_priority',
    'policy': 'rtforge_policy',
    'cpus': 'rtforge_cpus',
    'load': 'rtforge_load',
    'engine': 'rtforge_engine',
    'phase': 'rtforge_phase',
    'spike_us': 'rtforge_spike_us',
    'histogram_us': 'rtforge_histogram_us',
    'settle_s': 'rtforge_settle_s',
    'trace': 'rtforge_trace',
    'install': 'rtforge_install',
    'patience': 'rtforge_patience',
}

# option -> the flag of rtforge latency it is passed with (a bool: the flag alone, when true)
FLAGS = {
    'duration': '--duration',
    'loops': '--loops',
    'interval_us': '--interval-us',
    'priority': '--priority',
    'policy': '--policy',
    'cpus': '--cpus',
    'load': '--load',
    'engine': '--engine',
    'phase': '--phase',
    'spike_us': '--spike-us',
    'histogram_us': '--histogram-us',
    'settle_s': '--settle-s',
    'trace': '--trace',
    'install': '--install',
}

# rtforge's own defaults (the module's deadline counts with duration and interval_us)
DEFAULTS = {
    'duration': '60s',
    'interval_us': 200,
    'priority': 90,
    'policy': 'fifo',
    'engine': 'probe',
    'phase': 'together',
}
SETTLE_WITH_LOADS_S = 3   # settle_s when loads run and it is not given
