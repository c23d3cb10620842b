"""Plots, comparisons and reports, made from stored results only.

matplotlib is set up in plots.py, the only module that draws: commands that
never plot do not pay for importing it."""
