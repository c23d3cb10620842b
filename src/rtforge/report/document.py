"""A report of stored runs: one self-contained HTML file (inline SVG, inline
CSS, no network access when opened) or Markdown with its plots beside it.
The verdict comes first, then each system, the comparison, the plots, the
telemetry and each run's reproducer command."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from .. import __version__, paths
from ..errors import UserError
from ..results.display import (
    clean,
    known,
    loads_text,
    md_cell,
    md_code,
    md_text,
    other_latencies_line,
    priority_text,
    run_command,
    spike_lines,
)
from ..results.model import RunResult
from ..results.stats import percentile_text, summarize_cpu, telemetry_summary
from ..units import article, format_ns, format_seconds, format_us
from . import plots
from .compare import compare_runs
from .verdict import report_warnings, verdict


def _us(ns) -> str:
    return format_us(ns)


def _range(values, scale, fmt="{:.0f}") -> str:
    vals = [v / scale for v in values if v is not None]
    return "–" if not vals else f"{fmt.format(min(vals))}–{fmt.format(max(vals))}"


def system_row(r: RunResult) -> dict[str, Any]:
    s, c = r.system, r.config
    command, trusted = run_command(r)
    return {
        "run": r.label or r.run_id,
        "run_id": r.run_id,
        "state": r.state + (" (partial)" if r.partial else ""),
        "engine": r.engine + (" (emulated)" if c.get("emulated") else ""),
        "kernel": known(s.get("kernel_release")),
        "kernel_version": s.get("kernel_version") or "",
        "preempt_model": known(s.get("preempt_model")),
        "board": s.get("board_model") or s.get("cpu_model") or s.get("machine") or "?",
        "loads": loads_text(c).replace(",", ", "),
        "duration": "?" if r.duration_s is None else format_seconds(r.duration_s, bool(c.get("duration_source"))),
        "interval": "?" if c.get("interval_us") is None else f"{c['interval_us']} µs",
        "priority": priority_text(c),
        "cpus": ",".join(map(str, c.get("cpus") or [])) or "?",
        "governors": ", ".join(s.get("governors") or []) or "–",
        "cmdline": s.get("cmdline") or "",
        "reproducer": command if trusted else "",
        "foreign_command": "" if trusted else command,
    }


def telemetry_row(r: RunResult) -> dict[str, Any]:
    tel = r.telemetry or {}
    t = telemetry_summary(tel)
    freqs = [v for col in (tel.get("freq_khz") or {}).values() for v in col]
    # no telemetry at all (an import): nobody observed the board, which says nothing of its sensors
    absent = "not recorded" if r.telemetry is None else None
    return {
        "run": r.label or r.run_id,
        "temperature": absent or ("no sensor"
                                  if t["temp_max_mc"] is None
                                  else f"{t['temp_min_mc'] / 1000:.1f}–{t['temp_max_mc'] / 1000:.1f} °C"),
        "frequency": absent or (_range(freqs, 1000) + (" MHz" if freqs else "")),
        "throttling": absent or ("not reported"
                                 if t["throttled_seen"] is None
                                 else (", ".join(t["throttle_flags"]) if t["throttled_seen"] else "none seen")),
        "load1": absent or _range(tel.get("load1") or [], 1, "{:.2f}"),
    }


def figures(runs: list[RunResult], cycle_ns: int | None = None) -> list[tuple[str, str, plots.Figure | None]]:
    """(file stem, caption, figure) for every plot of the report; a run that
    kept no histogram gets its caption saying so and no figure."""
    out: list[tuple[str, str, plots.Figure | None]] = []
    kept, _ = plots.with_histogram(runs)
    log = plots.long_tail(kept)   # one x scale for every histogram of the report
    for i, r in enumerate(runs, 1):
        name = r.label or r.run_id
        try:
            out.append((f"hist-{i}", f"Latency histogram (OSADL style): {name}",
                        plots.latency_histogram(r, cycle_ns, log)))
        except plots.NothingToPlot as e:
            out.append((f"hist-{i}", f"No latency histogram for {name}: {e}", None))
        tl = plots.timeline(r, cycle_ns)
        if tl is not None:
            out.append((f"timeline-{i}", f"Per-second maximum and what was recorded beside it: {name}", tl))
    if kept:
        out.append(("exceedance", "Fraction of wake-ups later than x" + (" (per CPU)" if len(kept) == 1 else ""),
                    plots.exceedance(kept, cycle_ns)))
    if len(kept) > 1:
        out.append(("compare", "Histograms compared, all CPUs of each run", plots.compare_overlay(kept, cycle_ns, log)))
    return out


def context(runs: list[RunResult], cycle_ns: int | None) -> dict[str, Any]:
    verdicts = [verdict(r, cycle_ns) for r in runs] if cycle_ns else []
    return {
        "title": "rtforge latency report",
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "version": __version__,
        "cycle": format_ns(cycle_ns) if cycle_ns else None,
        "cycle_a": f"{article(format_ns(cycle_ns))} {format_ns(cycle_ns)}" if cycle_ns else None,
        "verdicts": verdicts,
        "warnings": {r.run_id: list(r.warnings) + report_warnings(r) for r in runs},
        "systems": [system_row(r) for r in runs],
        "comparison": compare_runs(runs) if len(runs) > 1 else [],
        "telemetry": [telemetry_row(r) for r in runs],
        "traced": [(r.label or r.run_id, spike_lines(r.trace)) for r in runs if r.trace is not None],
        "others": [(r.label or r.run_id, line) for r in runs if (line := other_latencies_line(r))],
        "runs": runs,
        "us": _us,
        "known": known,
        "cpu_name": plots.cpu_name,
        "stats": summarize_cpu,
        "pct": percentile_text,
    }


def _env() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(str(resources.files("rtforge.report") / "templates"))
    env = jinja2.Environment(
        loader=loader,
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    # Markdown: every text from a result through one of these (a '|' or a newline breaks a table)
    env.filters.update(cell=md_cell, text=md_text, code=md_code, prose=prose_html)
    return env


def prose_html(value: object) -> Markup:
    """A sentence rtforge wrote (a verdict, a warning, a caption) for HTML:
    escaped, its `command` spans set as code -- the page showed the
    backticks, Markdown source, in "build one with `rtforge kernel build`"."""
    parts = clean(value).split("`")
    if len(parts) % 2 == 0:   # a lone backtick (a label's own): the text as written
        return Markup.escape(clean(value))
    return Markup("").join(Markup.escape(p) if i % 2 == 0 else Markup("<code>%s</code>") % p
                           for i, p in enumerate(parts))


def _plots_dir_replaceable(files: Path) -> None:
    """The folder of a Markdown report's plots is replaced as a whole: only
    when it is one rtforge made (a real folder holding only .svg files)."""
    try:
        st = os.lstat(files)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UserError(paths.os_error_sentence(files, e, "replace")) from None
    ok = stat.S_ISDIR(st.st_mode) and all(
        p.suffix == ".svg" and p.is_file() and not p.is_symlink() for p in files.iterdir()
    )
    if not ok:
        raise UserError(
            f"cannot write the report's plots into {files}: it exists and is not a folder of plots "
            "rtforge made; move it away or choose another report name"
        )


def write_html(runs: list[RunResult], cycle_ns: int | None, out: Path) -> Path:
    ctx = context(runs, cycle_ns)
    ctx["figures"] = [(stem, caption, plots.inline_svg(fig) if fig else None)
                      for stem, caption, fig in figures(runs, cycle_ns)]
    return paths.write_output(out, _env().get_template("report.html.j2").render(**ctx))


def write_markdown(runs: list[RunResult], cycle_ns: int | None, out: Path) -> Path:
    """out plus a folder <stem>_files/ holding the plots as SVG.

    Everything is written into a temporary folder beside out first; only
    then is the old plots folder swapped for it and the report renamed into
    place, so a failure (a full disk) leaves the previous report whole."""
    out = paths.check_output(out)
    files = out.with_name(out.stem + "_files")
    _plots_dir_replaceable(files)
    ctx = context(runs, cycle_ns)
    rendered = [(f"{files.name}/{stem}.svg", caption, plots.render(fig, "svg") if fig else None)
                for stem, caption, fig in figures(runs, cycle_ns)]
    ctx["figures"] = [(path if svg else None, caption) for path, caption, svg in rendered]
    text = _env().get_template("report.md.j2").render(**ctx)
    tmp = old = None
    try:
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{files.name[:32]}."))
        for path, _, svg in rendered:
            if svg:
                paths.write_atomic(tmp / Path(path).name, svg)
        staged = tmp / ".report.md"
        paths.write_atomic(staged, text)
        os.chmod(tmp, 0o777 & ~_umask())
        if files.exists():
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{files.name[:32]}.old."))
            os.replace(files, old / "plots")
        os.replace(tmp, files)
        tmp = None
        os.replace(files / ".report.md", out)
    except OSError as e:
        if old is not None and (old / "plots").exists() and not files.exists():
            try:
                os.replace(old / "plots", files)  # put the previous report's plots back
            except OSError:
                pass
        raise UserError(paths.os_error_sentence(out, e)) from None
    finally:
        for leftover in (tmp, old):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
