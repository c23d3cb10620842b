"""The doctor room: what hurts latency on a target, each finding with its evidence and fix.

Checks of the kernel, the CPUs and the system run on one snapshot (state
room); the findings' words are data (data/findings.toml).  It reads and
never changes; it may use the state and transport rooms.
"""
