"""The raw room: what a run's engines left in its raw/, read into the stored result.

finalize turns a run's raw/ into its result once the run has ended, by
engine: the probe's files (probe), cyclictest's outputs (cyclictest: its
--json and status lines, also read by the importers), rtla's auto-analysis
of --trace spikes (rtla_analysis, also read by the rtla importer), and for
a CPU benchmark the bench room's rawsteps.  Every file is read through the
store room's rawfile; nothing here starts a process or decides when a run
ends (measure/lifecycle.py does).
"""
