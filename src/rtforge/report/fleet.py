"""The fleet report: one row per board -- its verdict for its own cycle
time, its worst case, kernel, whether it runs PREEMPT_RT, when it was last
seen -- then a section per board with the verdict's sentence, its run's
per-CPU figures and histogram, doctor's findings and what the last fleet
commands made of it.  One self-contained HTML file, as `rtforge report`.

It reads what the caller gathered (rtforge.fleet.evidence): entries with
host, vars, cycle_ns, board, run (a stored RunResult or None), last_seen,
last ({command: {outcome, message, at, fleet}}) and doctor (a report or
None) -- stored results and records only, never a live board.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__, paths
from ..results.display import known, loads_text
from ..results.stats import percentile_text, summarize_all, summarize_cpu
from ..units import format_ns, format_seconds, format_us
from . import plots
from .document import _env
from .verdict import verdict

ORDER = {"fail": 0, "tight": 1, "unknown": 2, "no cycle time": 3, "no run": 4, "pass": 5}


def _us(ns) -> str:
    return format_us(ns)


def board_row(e: Any, log: bool | None = None) -> dict[str, Any]:
    """One board's row and section; log: the x scale of every board's histogram (plots.long_tail)."""
    r = e.run
    row = {"host": e.host, "anchor": "board-" + "".join(c if c.isalnum() else "-" for c in e.host),
           "cycle": format_ns(e.cycle_ns) if e.cycle_ns else "–", "board": e.board or "–",
           "last_seen": (e.last_seen or "never").replace("+00:00", "Z"),
           "address": str(e.vars.get("ansible_host", e.host)),
           "run": r, "verdict": None, "figure": None, "figure_note": None, "cpus": [], "last": e.last,
           "doctor": _doctor(e.doctor)}
    if r is None:
        row.update(status="no run", sentence="no latency run of this board is stored: measure it with "
                   "`rtforge fleet latency INVENTORY --limit " + e.host + "`", worst="–", kernel="–", rt="–")
        return row
    s = summarize_all(r)
    model = r.system.get("preempt_model")
    row.update(worst=_us(s.max_ns), kernel=known(r.system.get("kernel_release")), preempt=known(model),
               rt="yes" if model == "rt" else ("no" if model else "?"), cpus=[summarize_cpu(c) for c in r.cpus],
               loads=loads_text(r.config), interval=r.config.get("interval_us"),
               duration="?" if r.duration_s is None else format_seconds(r.duration_s))
    if e.cycle_ns:
        v = verdict(r, e.cycle_ns)
        row.update(verdict=v, status=v.status, sentence=v.sentence)
    else:
        row.update(status="no cycle time", sentence="no cycle time to judge it by: set rtforge_cycle_time for it "
                   "in the inventory, or give --cycle-time")
    try:
        row["figure"] = plots.inline_svg(plots.latency_histogram(r, e.cycle_ns, log))
    except plots.NothingToPlot as err:
        row["figure_note"] = str(err)
    return row


def _doctor(report: dict | None) -> dict | None:
    if not report:
        return None
    findings = report.get("findings") or []
    counts = {k: sum(1 for f in findings if f.get("severity") == k) for k in ("blocks-rt", "costs-latency", "note")}
    worst = [f for f in findings if f.get("severity") in ("blocks-rt", "costs-latency")][:6]
    return {"counts": counts, "worst": worst}


def context(entries: list[Any], inventory: str, cycle_given: str | None,
            counted: Callable[[dict[str, int]], str] | None = None) -> dict[str, Any]:
    """counted: doctor's words for its findings by severity ("0 block RT, 3 notes"), which the cli
    passes down from the device layer, out of this one's reach."""
    log = plots.long_tail([e.run for e in entries if e.run is not None and plots.with_histogram([e.run])[0]])
    rows = [board_row(e, log) for e in entries]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return {"title": "rtforge fleet report", "inventory": inventory, "rows": rows, "version": __version__,
            "generated": datetime.now(UTC).isoformat(timespec="seconds"),
            "counts": sorted(counts.items(), key=lambda kv: ORDER.get(kv[0], 9)), "cycle_given": cycle_given,
            "us": _us, "pct": percentile_text,
            "counted": counted or (lambda counts: ", ".join(f"{n:,} {s}" for s, n in counts.items()))}


def write_html(entries: list[Any], inventory: str, cycle_given: str | None, out: Path,
               counted: Callable[[dict[str, int]], str] | None = None) -> Path:
    ctx = context(entries, inventory, cycle_given, counted)
    return paths.write_output(out, _env().get_template("fleet.html.j2").render(**ctx))
