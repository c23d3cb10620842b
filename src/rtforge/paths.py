"""Where rtforge keeps things, per the XDG base directory spec."""

import os
from pathlib import Path


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var)
    # The spec says relative paths are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def data_dir() -> Path:
    """Run store root unless --results-dir / RTFORGE_RESULTS_DIR says otherwise."""
    override = os.environ.get("RTFORGE_RESULTS_DIR")
    return Path(override) if override else _xdg("XDG_DATA_HOME", ".local/share") / "rtforge"


def cache_dir() -> Path:
    """Built probes, kernel sources and ccache: safe to delete."""
    override = os.environ.get("RTFORGE_CACHE_DIR")
    return Path(override) if override else _xdg("XDG_CACHE_HOME", ".cache") / "rtforge"
