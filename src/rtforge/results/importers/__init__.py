"""Importing cyclictest outputs people already have into the run store.

One entry point, ``import_file``: it recognises the format, reads the file
completely, and only then stores it, so bad input leaves nothing behind.
Each import becomes a run with engine ``import``, the source file's name,
sha256 and format in ``source``, and the file itself, byte for byte, in the
run's ``raw/``.  Importing a file with the same sha256 again is refused.

Formats (all cyclictest from rt-tests 2.x):

* text: ``-h N -q`` / ``-H N`` histograms, also with ``-N``, ``--spike``
  and ``-b``; summary-only status lines, quiet or with terminal escapes
  (``text.py``);
* ``--json=FILE`` (``jsonfile.py``);
* the CSV of the blog recipe made from a ``-h`` histogram (``csvfile.py``).

Text and CSV outputs do not say when they were measured: their start time
is the file's modification time, the best evidence there is.  Nor do they
name CPUs: their "cpu" is cyclictest's thread number (``--json`` has both).
"""

from __future__ import annotations

import hashlib
import shutil
from datetime import datetime, timezone
from pathlib import Path

from ...errors import UserError
from ..checks import run_warnings
from ..model import RunResult
from ..store import Store
from .common import EXPECTED, Parsed, Source
from .csvfile import looks_like_csv, read_csv
from .jsonfile import read_json
from .text import read_text

READERS = {"json": read_json, "csv": read_csv, "text": read_text}


def _read(path: Path) -> bytes:
    name = str(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{name}: no such file; give the path of a cyclictest output to import") from None
    except IsADirectoryError:
        raise UserError(f"{name} is a directory; give the path of one cyclictest output file") from None
    except PermissionError:
        raise UserError(f"{name}: permission denied; make the file readable or import a copy of it") from None
    except OSError as e:
        raise UserError(f"{name}: cannot read it ({e.strerror or e}); check the path") from None


def decode(name: str, data: bytes) -> Source:
    """The file as text, or an error naming the line where it stops being text."""
    def line_at(offset: int) -> int:
        return data.count(b"\n", 0, offset) + 1
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        # PowerShell's '>' writes UTF-16 with a byte order mark: a capture
        # made on Windows over ssh is still cyclictest's output.
        try:
            data = data.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{name}:1: starts like UTF-16 text but is not; expected {EXPECTED}") from None
    if not data.strip():
        raise UserError(f"{name}:1: the file is empty; expected {EXPECTED}")
    nul = data.find(b"\0")
    if nul >= 0:
        raise UserError(f"{name}:{line_at(nul)}: binary data (a NUL byte), not text; expected {EXPECTED}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        byte = data[e.start]
        raise UserError(f"{name}:{line_at(e.start)}: not UTF-8 text (byte 0x{byte:02x}); expected {EXPECTED}") from None
    return Source(name, text)


def detect(src: Source) -> str:
    """json | csv | text.  cyclictest's text never holds a comma; its JSON starts with '{'."""
    if src.text.lstrip().startswith("{"):
        return "json"
    if looks_like_csv(src):
        return "csv"
    return "text"


def parse(path: Path | str, data: bytes) -> Parsed:
    """Read a file's bytes without storing anything (raises UserError)."""
    src = decode(str(path), data)
    return READERS[detect(src)](src)


def _start(parsed: Parsed, path: Path) -> datetime:
    if parsed.start_time:
        return datetime.fromisoformat(parsed.start_time)
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).replace(microsecond=0)
    except (OSError, OverflowError, ValueError):
        return datetime.now(timezone.utc).replace(microsecond=0)


def import_file(path: Path | str, store: Store, label: str | None = None) -> RunResult:
    """Store a cyclictest output as a complete run; UserError for bad input or a repeat import."""
    path = Path(path)
    data = _read(path)
    sha256 = hashlib.sha256(data).hexdigest()
    existing = store.find_by_source(sha256)
    if existing:
        raise UserError(f"{path} was already imported as run {existing} (same sha256); "
                        f"`rtforge show {existing}` shows it")
    parsed = parse(path, data)
    start = _start(parsed, path)
    host = parsed.host or "unknown"
    run_id = store.new_run_id(host, start)
    while store.run_dir(run_id).exists():  # same second and host: draw another suffix
        run_id = store.new_run_id(host, start)
    result = RunResult(
        run_id=run_id, engine="import", state="complete", host=host,
        start_time=start.isoformat(timespec="seconds"), label=label, duration_s=parsed.duration_s,
        requested=parsed.requested, config=parsed.config, system=parsed.system, reproducer=parsed.reproducer,
        engine_argv=parsed.engine_argv, cpus=parsed.cpus, top_spikes=parsed.top_spikes,
        source={"file": path.name, "sha256": sha256, "format": parsed.format},
    )
    result.warnings = parsed.warnings + _generic_warnings(result)
    _save(store, result, path.name, data)
    return result


def _generic_warnings(result: RunResult) -> list[str]:
    """The warnings every run gets, minus the generic histogram-overflow one
    for -N runs: their own warning explains that overflow and its real fix
    (drop -N), where the generic one would advise a larger histogram."""
    warnings = run_warnings(result)
    if result.config.get("resolution_ns") == 1:
        overflow = sum(c.hist.overflow for c in result.cpus)
        warnings = [w for w in warnings if not w.startswith(f"{overflow} samples fell beyond")]
    return warnings


def _save(store: Store, result: RunResult, name: str, data: bytes) -> None:
    """The raw copy is the bytes that were hashed, so it matches the sha256 even
    if the file changed meanwhile; any failure removes the half-made run."""
    run_dir = store.run_dir(result.run_id)
    try:
        (run_dir / "raw").mkdir(parents=True)
        (run_dir / "raw" / name).write_bytes(data)
        store.save(result)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        try:
            store.delete(result.run_id)
        except Exception:
            pass  # the index is rebuilt from run directories; the directory is gone
        raise
