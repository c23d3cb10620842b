"""The bench room: CPU benchmark runs (kind "bench", `rtforge bench cpu`).

What RunResult.bench holds and the figures derived from it when shown or
compared (summary), and how it is read from what the benchmark's steps
left in a run's raw/, stress-ng's metrics included (rawsteps).  The steps
themselves are measure/bench.py's.  It uses the run model and the store
room's rawfile.
"""
