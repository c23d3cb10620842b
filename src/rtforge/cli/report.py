"""rtforge compare / plot / report: evidence from stored runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .. import paths
from ..errors import UserError
from ..report.compare import compare_bench, compare_runs, one_kind
from ..report.verdict import parse_cycle_time, verdict
from ..results.display import known
from ..results.store.runstore import Store
from .bench import print_bench_compare
from .common import RESULTS_DIR, settled_store
from .render import Col, cell, fitted, make_console, print_table, shown, us

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


KINDS = ("hist", "timeline", "cdf", "compare")


def _load(store: Store, refs: list[str]):
    if not refs:
        raise UserError("name at least one run (a run id, a unique prefix, or 'last'); `rtforge runs` lists them")
    ids = [store.resolve(ref) for ref in refs]
    for i, run_id in enumerate(ids):
        if run_id in ids[:i]:   # a run beside itself: ratios of 1, curves drawn twice
            first = refs[ids.index(run_id)]
            same = (f"'{shown(first)}' and '{shown(refs[i])}' both name" if first != refs[i]
                    else f"'{shown(first)}' names twice")
            raise UserError(f"{same} run {run_id}: a run is not compared with itself; name each run once")
    return [store.load(run_id) for run_id in ids]


def _latency_only(loaded, command: str) -> None:
    for r in loaded:
        if r.kind == "bench":
            raise UserError(
                f"{r.run_id} is a CPU benchmark, not a latency run: `rtforge {command}` takes latency runs; "
                f"`rtforge show` and `rtforge compare` show benchmarks"
            )


# What differs between the runs, and by how much: the name, the tail and the ratios stay
# (a long label or an import's id wraps, a measured run's id of 23 stays whole: the max beside
# it must never be squeezed out).
COMPARE_COLS = [Col("run", key=True, wrap=True, min_width=23), Col("kernel", drop=3, wrap=True, min_width=10),
                Col("preempt", drop=4),
                Col("load", drop=2), Col("wake-ups", drop=1, right=True), Col("min", drop=0, right=True),
                Col("avg", drop=0, right=True), Col("p99", drop=6, right=True), Col("p99.99", drop=5, right=True),
                Col("max", key=True, right=True), Col("versus first", key=True, wrap=True, min_width=16),
                Col("state", drop=7)]


@app.command()
def compare(
    runs: list[str] = typer.Argument(..., help="runs to compare; ratios are to the first"),
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the rows as JSON"),
) -> None:
    """Runs side by side: min, avg, p99, p99.99, max, wake-ups, load, kernel, preemption
    (bench runs: median solve time and stress-ng rate per thread count)."""
    loaded = _load(settled_store(results_dir), runs)
    if one_kind(loaded) == "bench":
        bench_rows = compare_bench(loaded)
        if as_json:
            print(json.dumps(bench_rows, indent=1))
        else:  # labels come from users and files: print_bench_compare shows them as written
            print_bench_compare(bench_rows)
        return
    rows = compare_runs(loaded)
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    states = [r.state + (" (partial)" if r.partial else "") for r in loaded]
    cells = [[cell(v) for v in (r["label"] or r["run_id"], known(r["kernel_release"]), known(r["preempt_model"]),
                                r["loads_text"], f"{r['count']:,}", us(r["min_ns"]), us(r["avg_ns"]), r["p99_text"],
                                r["p9999_text"], us(r["max_ns"]), r["versus_first"], state)]
             for r, state in zip(rows, states)]
    cols = list(COMPARE_COLS)
    if any(state != "complete" for state in states):   # a partial run never passes for a whole one
        cols[-1] = Col("state", key=True, wrap=True, min_width=11)
    console = make_console()
    console.print("latency in µs", style="dim")
    print_table(console, fitted(console, cols, cells, alike_first=True))


PLOT_FORMATS = {".svg": "svg", ".png": "png"}
REPORT_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


def output_format(output: Path, fmt: str | None, known: dict[str, str], what: str) -> str:
    """The format --format names, else the one the file name's extension says."""
    choices = sorted(set(known.values()))
    if fmt is not None:
        if fmt.lower() not in choices:
            raise UserError(f"unknown {what} format '{shown(fmt)}': choose {' or '.join(choices)}")
        return fmt.lower()
    ext = output.suffix.lower()
    if ext not in known:
        raise UserError(f"cannot tell the {what} format of '{shown(output)}': end the file name in "
                        f"{' or '.join(known)}, or give --format {' or '.join(choices)}")
    return known[ext]


CYCLE = typer.Option(None, "--cycle-time", "-C", metavar="DURATION",
                     help="your control cycle, e.g. 1ms or 250us: the verdict, and a "
                     "line in the plots")
# a plot gives no verdict (`rtforge report` does): its help says what the option does there
PLOT_CYCLE = typer.Option(None, "--cycle-time", "-C", metavar="DURATION",
                          help="your control cycle, e.g. 1ms or 250us: marked in the plot (a line, or an arrow "
                          "at the edge when it lies far beyond the data)")


@app.command()
def plot(
    runs: list[str] = typer.Argument(..., help="run(s) to plot: id, unique id prefix, label or 'last'"),
    kind: str = typer.Option("hist", "--kind", "-k", metavar="hist|timeline|cdf|compare",
                             help="hist (OSADL), timeline, cdf (exceedance) or compare"),
    output: Path | None = typer.Option(None, "--output", "-o", help="file to write; .svg or .png sets the format "
                                       "(default: latency-KIND.svg in this folder)"),
    fmt: str | None = typer.Option(None, "--format", "-f", metavar="svg|png",
                                      help="svg or png (default: from the file name)"),
    cycle_time: str | None = PLOT_CYCLE,
    results_dir: Path | None = RESULTS_DIR,
) -> None:
    """One plot of stored runs, as SVG or PNG."""
    if kind not in KINDS:
        raise UserError(f"unknown plot kind '{shown(kind)}': choose {', '.join(KINDS)}")
    named = output is not None
    output = output or Path(f"latency-{kind}.{(fmt or 'svg').lower()}")
    fmt = output_format(output, fmt, PLOT_FORMATS, "plot")
    cycle_ns = parse_cycle_time(cycle_time) if cycle_time else None
    paths.check_output(output)
    loaded = _load(settled_store(results_dir), runs)
    _latency_only(loaded, "plot")
    if kind in ("hist", "timeline") and len(loaded) != 1:
        raise UserError(f"--kind {kind} plots one run; use --kind compare or cdf for several")
    if kind == "compare" and len(loaded) < 2:
        raise UserError("--kind compare needs at least two runs")
    from ..report import plots  # matplotlib: only for the commands that draw

    try:
        if kind == "hist":
            fig = plots.latency_histogram(loaded[0], cycle_ns)
        elif kind == "timeline":
            drawn = plots.timeline(loaded[0], cycle_ns)
            if drawn is None:
                raise UserError(f"run {loaded[0].run_id} has no per-second series (only probe runs record one)")
            fig = drawn
        elif kind == "cdf":
            fig = plots.exceedance(loaded, cycle_ns)
        else:
            fig = plots.compare_overlay(loaded, cycle_ns)
    except plots.NothingToPlot as e:
        raise UserError(f"nothing to plot: {e}") from None
    console = make_console()
    if kind in ("cdf", "compare"):
        for line in plots.with_histogram(loaded)[1]:   # one line each, as the report's caption says it
            console.print(shown(line), highlight=False)
    paths.write_output(output, plots.render(fig, fmt))
    # without -o the file's name and folder were rtforge's choice: say both, and how to choose
    console.print(f"wrote {shown(output)}" if named else
                  f"wrote {shown(output.absolute())} (no -o given: the name of --kind {kind}; -o names the file)",
                  highlight=False)


@app.command()
def report(
    runs: list[str] = typer.Argument(..., help="run(s) to report on, the first is the baseline: id, unique id "
                                     "prefix, label or 'last'"),
    cycle_time: str | None = CYCLE,
    output: Path | None = typer.Option(
        None, "--output", "-o", help="file to write; .html or .md sets the format (default report.html)"
    ),
    fmt: str | None = typer.Option(None, "--format", "-f", metavar="html|md",
                                      help="html (one self-contained file) or md "
                                      "(default: from the file name)"),
    results_dir: Path | None = RESULTS_DIR,
) -> None:
    """A report with the verdict first, then systems, comparison, plots, telemetry and reproducers."""
    named = output is not None
    output = output or Path(f"report.{(fmt or 'html').lower()}")
    fmt = output_format(output, fmt, REPORT_FORMATS, "report")
    cycle_ns = parse_cycle_time(cycle_time) if cycle_time else None
    output = paths.check_output(output)
    loaded = _load(settled_store(results_dir), runs)
    _latency_only(loaded, "report")
    from ..report import document  # matplotlib: only for the commands that draw

    write = document.write_html if fmt == "html" else document.write_markdown
    write(loaded, cycle_ns, output)
    console = make_console()
    if cycle_ns:
        for r in loaded:
            v = verdict(r, cycle_ns)
            console.print(f"{v.status.upper()}: {shown(r.label or r.run_id)} {shown(v.sentence)}", highlight=False)
    console.print(f"wrote {shown(output)}" if named else
                  f"wrote {shown(output.absolute())} (no -o given: the default name; -o names the file)",
                  highlight=False)
