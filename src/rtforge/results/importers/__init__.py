"""Importing cyclictest outputs people already have into the run store.

One entry point, ``import_file``: it takes only a regular file of at most
1 GiB (``source.py``), streams it into a hidden folder of the store while
hashing it, recognises the format, reads it completely, and only then makes
that folder a run, so bad input leaves nothing behind.
Each import becomes a run with engine ``import``, the source file's name,
sha256 and format in ``source``, and the file itself, byte for byte, in the
run's ``raw/``.  Importing a file with the same sha256 again is refused.

Formats (cyclictest from rt-tests 0.84 to 2.x):

* text: ``-h N -q`` / ``-H N`` histograms, also with ``-N``, ``--spike``
  and ``-b``, all rows or (rt-tests 2.x) only the non-empty ones;
  summary-only status lines, quiet or with terminal escapes (``text.py``);
  ``-v``, a line per wake-up, with or without ``-q``'s status lines
  (``verbose.py``); a whole output followed by one line that is not
  cyclictest's (a prompt) imports with a warning naming that line;
* ``--json=FILE`` (``jsonfile.py``);
* the CSV of the blog recipe made from a ``-h`` histogram (``csvfile.py``);
* rtla timerlat hist and top (``rtla.py``, ``rtlatop.py``): the thread
  latency is the run's, the IRQ and return-to-user latencies are kept in
  ``source["other_latencies"]``.

Text and CSV outputs do not say when they were measured: their start time
is the file's modification time, the best evidence there is.  Nor do they
name CPUs: their "cpu" is cyclictest's thread number (``--json`` has both).

The importers room may use the store room (to save the run) and the raw
room (cyclictest's and rtla's parsers, shared with rtforge's own runs).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ... import paths
from ...errors import UserError
from ..checks import overflow_text, run_warnings
from ..model import MAX_LABEL, RunResult
from ..store.runstore import Store
from .common import Parsed
from .csvfile import looks_like_csv, read_csv
from .jsonfile import read_json
from .rtla import is_top, looks_like_rtla, read_hist
from .rtlatop import read_top
from .source import Source, TextCheck, copy_and_hash, open_input
from .text import read_text

READERS = {"json": read_json, "csv": read_csv, "text": read_text, "rtla-hist": read_hist, "rtla-top": read_top}


def detect(src: Source) -> str:
    """json | rtla-hist | rtla-top | csv | text.  cyclictest's text never holds
    a comma; its JSON starts with '{'; rtla's first lines name it."""
    prefix = src.prefix()
    if prefix.lstrip().startswith("{"):
        return "json"
    if looks_like_rtla(prefix):
        return "rtla-top" if is_top(prefix) else "rtla-hist"
    if looks_like_csv(src):
        return "csv"
    return "text"


def parse_source(src: Source) -> Parsed:
    return READERS[detect(src)](src)


def parse(path: Path | str, data: bytes) -> Parsed:
    """Read a file's bytes without storing anything (raises UserError)."""
    check = TextCheck(str(path))
    check.feed(data)
    check.end()
    return parse_source(Source.from_bytes(str(path), data))


def _start(parsed: Parsed, mtime: float) -> tuple[datetime, str | None]:
    """When the run started, and where that came from when the file does
    not say it (the run's id holds it too, so the import says so)."""
    if parsed.start_time:
        return datetime.fromisoformat(parsed.start_time), None
    try:
        return datetime.fromtimestamp(mtime, UTC).replace(microsecond=0), "mtime"
    except (OSError, OverflowError, ValueError):
        return datetime.now(UTC).replace(microsecond=0), "import"


def _raw_name(path: Path) -> str:
    return path.name if path.name not in ("", ".", "..") else "output.txt"


_WHAT = {"kernel_release": "kernel release", "preempt_model": "preemption model", "loads": "load",
         "priority": "priority"}
_OPTION = {"kernel_release": "--kernel", "preempt_model": "--preempt", "loads": "--load", "priority": "--priority"}


@dataclass
class Stated:
    """What the user knows of an imported run and the file does not say."""

    kernel_release: str | None = None
    preempt_model: str | None = None
    loads: list[str] | None = None       # [] for a run without load
    priority: int | None = None

    def apply(self, result: RunResult, path: Path) -> None:
        """Fill in what the file left unknown; refuse what contradicts it."""
        for key, where, value in (("kernel_release", result.system, self.kernel_release),
                                  ("preempt_model", result.system, self.preempt_model),
                                  ("loads", result.config, self.loads),
                                  ("priority", result.config, self.priority)):
            if value is None:
                continue
            said = where.get(key)
            if said not in (None, "unknown", value):
                option = _OPTION[key]
                raise UserError(f"{path} says {_WHAT[key]} {said!r}, but {option} says {value!r}; "
                                f"leave {option} out, or import the right file")
            where[key] = value
        if self.priority is not None and "policy" not in result.config:
            result.config["policy"] = "other" if self.priority == 0 else "fifo"
        if self.preempt_model is not None:
            result.system["preempt_model_source"] = "stated at import"


def import_file(path: Path | str, store: Store, label: str | None = None, stated: Stated | None = None) -> RunResult:
    """Store a cyclictest output as a complete run; UserError for bad input or a repeat import.

    The file is copied into a hidden folder of the store while its sha256 is
    taken, and parsed from that copy, so the stored raw file is exactly the
    one that was read; the folder becomes the run's only when all is well."""
    path = Path(path)
    if label is not None:  # bytes that were not UTF-8 in argv arrive as lone surrogates
        label = label.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if label is not None and len(label) > MAX_LABEL:
        raise UserError(f"the label is {len(label):,} characters long; give one of at most {MAX_LABEL}")
    with open_input(path) as f:
        mtime = os.fstat(f.fileno()).st_mtime
        staging = store.staging()
        try:
            raw = staging / "raw"
            copy = raw / _raw_name(path)
            try:
                raw.mkdir()
                sha256 = copy_and_hash(f, copy, str(path))
            except OSError as e:
                raise UserError(paths.os_error_sentence(store.root, e, "copy the file into the run store")) from None
            if existing := store.find_by_source(sha256):  # early, before a long parse; again below, locked
                raise UserError(f"{path} was already imported as run {existing} (same sha256); "
                                f"`rtforge show {existing}` shows it")
            result = _result(path, store, label, sha256, parse_source(Source.from_path(str(path), copy)), mtime,
                             stated or Stated())
            with store.writing():  # the check and the add as one step: two imports of one file cannot both land
                existing = store.find_by_source(sha256)
                if existing:
                    raise UserError(f"{path} was already imported as run {existing} (same sha256); "
                                    f"`rtforge show {existing}` shows it")
                store.add(result, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return result


def _result(path: Path, store: Store, label: str | None, sha256: str, parsed: Parsed, mtime: float,
            stated: Stated) -> RunResult:
    start, guessed = _start(parsed, mtime)
    host = parsed.host or "unknown"
    result = RunResult(
        run_id=store.new_run_id(path.stem[:24] or host, start), engine="import", state="complete", host=host,
        start_time=start.isoformat(timespec="seconds"), label=label, duration_s=parsed.duration_s,
        requested=parsed.requested, config=parsed.config, system=parsed.system,
        cpus=parsed.cpus, top_spikes=parsed.top_spikes, trace=parsed.trace,
        source={"file": _raw_name(path), "sha256": sha256, "format": parsed.format,
                **({"command_line": parsed.command_line} if parsed.command_line else {}),
                **({"start_time_from": guessed} if guessed else {}), **parsed.source_extra},
    )
    stated.apply(result, path)
    if result.duration_s is None and (length := _length_from_cycles(result)) is not None:
        result.duration_s = length
        result.config["duration_source"] = "cycles × interval"
    result.warnings = parsed.warnings + _generic_warnings(result)
    return result


def _length_from_cycles(result: RunResult) -> float | None:
    """How long the run lasted, from what the file does state: each thread's
    wake-ups times its interval (cyclictest's -d gives each thread its own),
    the longest of them.  None when the file gives no interval."""
    interval = result.config.get("interval_us")
    intervals = result.config.get("thread_intervals_us") or []
    if not isinstance(interval, (int, float)) or interval <= 0:
        return None
    spans = [c.count * (intervals[i] if i < len(intervals) else interval) for i, c in enumerate(result.cpus)]
    longest = max(spans, default=0)
    return longest / 1e6 if longest else None


def _generic_warnings(result: RunResult) -> list[str]:
    """The warnings every run gets, minus the generic histogram-overflow one
    for -N runs: their own warning explains that overflow and its real fix
    (drop -N), where the generic one would advise a larger histogram."""
    warnings = run_warnings(result)
    if result.config.get("resolution_ns") == 1 or str((result.source or {}).get("format")).startswith("rtla"):
        # rtla's own warning says what its -E and -b would change, the generic one would say -h
        overflow = sum(c.hist.overflow for c in result.cpus)
        warnings = [w for w in warnings if not w.startswith(overflow_text(overflow))]
    return warnings
