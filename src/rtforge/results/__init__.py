"""What rtforge measured, kept: the run model at the top, the rest in rooms.

    model, schema, hist   a stored run (result.json), the shape it must have,
                          its histograms
    stats, checks, system what is derived from it: statistics, warnings,
                          facts about the measured system
    display               its texts made safe to show

    store/      the run store: run folders, read without trusting them, and their index
    soak/       the soak monitor's windows, a board's fetched history, the promotion rule
    bench/      CPU benchmark runs: their stored figures and how their steps are read
    raw/        what a run's engines left in raw/, read into its result (finalize)
    importers/  outputs people already have (cyclictest, rtla), stored as runs

tests/unit/test_layers.py holds which room may import which; the run model
imports none.  results/ imports no other layer of rtforge.
"""
