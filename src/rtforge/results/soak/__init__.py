"""The soak room: a board's long-running monitor history, as windows and the verdicts drawn from them.

The soak monitor's windows, hours and days, read without trusting them,
on the board or fetched (windows); a board's fetched folder in the store
(folder) and the SQLite index of it that reads a range without decoding
the whole history (windowsdb); the promotion rule, which calls a kernel
promoted, waiting or regressed against the one before it (promotion).
It uses the run model only (histograms, Damaged): a soak is not a run.
"""
