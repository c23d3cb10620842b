"""Plots, comparisons and reports, made from stored results only."""

import matplotlib

matplotlib.use("Agg")  # no display, ever
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVG
