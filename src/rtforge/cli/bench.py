"""rtforge bench cpu: what PREEMPT_RT costs in throughput (N-queens solve
times and stress-ng bogo ops), here or on a board; and how `show` and
`compare` display such runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ..device import board_host, open_transport
from ..errors import UserError
from ..measure.bench import DEFAULT_N, N_RANGE, BenchSpec, parse_threads, run_bench
from ..results.bench.summary import bench_show_dict, summarize_bench
from ..results.display import known
from ..results.model import RunResult
from ..results.store.runstore import Store
from .common import HOST_OPTIONAL, RESULTS_DIR, SSH_CONFIG, LiveLine, check_label
from .render import Col, cell, fitted, make_console, print_table, shown

app = typer.Typer()  # this module's commands (cli/__init__.py's LazyGroup loads them)


bench_app = typer.Typer(no_args_is_help=True, help="Throughput benchmarks: what a PREEMPT_RT kernel costs.")
app.add_typer(bench_app, name="bench")


def secs(s: float | None) -> str:
    """Seconds, in the unit that keeps three significant digits readable."""
    if s is None:
        return "–"
    if s >= 100:
        return f"{s:.0f} s"
    if s >= 1:
        return f"{s:.2f} s" if s < 10 else f"{s:.1f} s"
    return f"{s * 1000:.2f} ms" if s >= 0.001 else f"{s * 1e6:.0f} µs"


def _ops(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


@bench_app.command("cpu")
def cpu(
    host: str | None = typer.Argument(
        None, help=HOST_OPTIONAL
    ),
    threads: str = typer.Option("1,all", "--threads", "-t", help="thread counts, e.g. 1,4; 'all' = every usable CPU"),
    n: int = typer.Option(
        DEFAULT_N, "--n", help=f"board size N ({N_RANGE[0]}-{N_RANGE[1]}; each step up is ~6× longer)"
    ),
    repeat: int = typer.Option(5, "--repeat", "-r", help="solves per thread count (median and spread over these)"),
    warmup: int = typer.Option(1, "--warmup", help="discarded rounds before measuring"),
    stress_s: int = typer.Option(10, "--stress-s", help="seconds of stress-ng per thread count (0: skip it)"),
    stress_optional: bool = typer.Option(
        False, "--stress-optional", help="skip stress-ng with a warning when it is missing"
    ),
    label: str | None = typer.Option(None, "--label", help="a name for this run, e.g. 'RT 6.12'"),
    results_dir: Path | None = RESULTS_DIR,
    ssh_config: Path | None = SSH_CONFIG,
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON (as `show --json`)"),
) -> int:
    """N-queens solve time with 1 and all CPUs, and stress-ng bogo ops/s: stored as a run of kind bench."""
    host = board_host(host)
    spec = BenchSpec(
        n=n,
        threads=parse_threads(threads),
        repeat=repeat,
        warmup=warmup,
        stress_s=stress_s,
        stress_optional=stress_optional,
        label=check_label(label) or None if label is not None else None,
        host=host,
    )
    spec.validate()  # before connecting: bad input leaves no trace anywhere
    if ssh_config is not None and host is None:
        raise UserError("--ssh-config names how to reach a HOST: give the HOST too")
    transport = open_transport(host, ssh_config)
    store = Store(results_dir)
    console = make_console()
    try:
        if sys.stdout.isatty() and not as_json:
            with LiveLine(console, count="steps") as live:
                live.update("connecting")
                result = run_bench(spec, store, transport=transport, on_progress=live.bench)
        else:
            result = run_bench(spec, store, transport=transport)
    except KeyboardInterrupt:
        print("rtforge: interrupted: the benchmark was stopped on the target and nothing was stored", file=sys.stderr)
        return 130
    finally:
        transport.close()
    if as_json:
        print(json.dumps(bench_show_dict(result), indent=1))
    else:
        print_bench_result(result, console)
        console.print(f"stored as {result.run_id} in {store.root}", style="dim")
    return 0


# -- display, shared with `show` and `compare` ---------------------------------


def bench_header(r: RunResult) -> str:
    """Rich markup; what came from a user, a board or a file (the label, host,
    kernel, board model) is escaped here, for every caller."""
    b, s = r.bench or {}, r.system
    wall = f"{r.duration_s:.0f} s" if r.duration_s is not None else "?"
    return "\n".join(
        [
            f"[bold]{shown(r.run_id)}[/bold]" + (f"  “{shown(r.label)}”" if r.label else ""),
            # under 80 columns for the usual N, counts and times, so that it does not wrap
            f"N-queens N={shown(b.get('n', '?'))} · {shown(b.get('repeat', '?'))} solves per thread count"
            f" (+{shown(b.get('warmup', 0))} warm-up) · {r.state} · {wall}",
            f"{shown(r.host)} · kernel {shown(s.get('kernel_release', '?'))} · preemption "
            f"{shown(s.get('preempt_model', '?'))}" + (f" · {shown(s['board_model'])}" if s.get("board_model") else ""),
        ]
    )


# Fitted to the terminal (render.fitted): the thread count, the median and
# stress-ng's rate are what a user came for; the spread goes before them.
BENCH_COLS = [Col("threads", key=True, right=True), Col("solutions", drop=0, right=True),
              Col("median", key=True, right=True), Col("min", drop=2, right=True), Col("max", drop=3, right=True),
              Col("IQR", drop=1, right=True), Col("CPUs busy", drop=4, right=True),
              Col("bogo ops/s", drop=5, right=True)]   # dropped last; at once when stress-ng was not run


def bench_table(r: RunResult, console: Console | None = None) -> Table:
    summary = summarize_bench(r.bench or {})
    rows = [[str(row["threads"]), f"{row['solutions']:,}", secs(row["median_s"]), secs(row["min_s"]),
             secs(row["max_s"]), secs(row["iqr_s"]), "–" if row["cpus_busy"] is None else f"{row['cpus_busy']:.2f}",
             _ops(row["stress_bogo_ops_per_s"])] for row in summary]
    return fitted(console or make_console(), BENCH_COLS, rows,
                  style=lambda n: "bold" if summary[n]["threads"] > 1 else None)


def print_bench_result(r: RunResult, console: Console | None = None) -> None:
    console = console or make_console()
    console.print(bench_header(r))
    stress = (r.bench or {}).get("stress_ng")
    console.print(
        "solve time over the repetitions; CPUs busy = CPU time / wall time"
        + (
            f"; stress-ng {stress['version']} --cpu-method {stress['method']}, {stress['duration_s']} s each"
            if stress
            else "; stress-ng: not run"
        ),
        style="dim", markup=False,
    )
    print_table(console, bench_table(r, console))
    for w in r.warnings:
        console.print(f"[yellow]warning:[/yellow] {shown(w)}", highlight=False)


# A long label wraps (a run id, 23 columns, stays whole) so that the kernel,
# what a bench comparison is usually about, keeps its room.
COMPARE_BENCH_COLS = [Col("run", key=True, wrap=True, min_width=23), Col("kernel", drop=4, wrap=True, min_width=10),
                      Col("preempt", drop=1), Col("threads", key=True, right=True), Col("median", key=True, right=True),
                      Col("min–max", drop=0, right=True), Col("vs first", key=True, right=True),
                      Col("bogo ops/s", drop=2, right=True), Col("ops vs first", drop=3, right=True)]


def print_bench_compare(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    """Bench runs side by side; the rows' texts (labels, kernels) are shown as written, never read as markup."""
    console = console or make_console()
    cells = [[cell(r["label"] or r["run_id"]) if i == 0 else "", cell(known(r["kernel_release"])) if i == 0 else "",
              cell(known(r["preempt_model"])) if i == 0 else "", str(th["threads"]), secs(th["median_s"]),
              f"{secs(th['min_s'])}–{secs(th['max_s'])}", _ratio(th["time_ratio_to_first"]),
              _ops(th["stress_bogo_ops_per_s"]), _ratio(th["stress_ratio_to_first"])]
             for r in rows for i, th in enumerate(r["threads"])]
    console.print(
        f"N-queens N={rows[0]['n']}: median solve time; ratios are to the first run (> 1: slower); "
        "bogo ops/s: stress-ng's rate", style="dim"
    )
    print_table(console, fitted(console, COMPARE_BENCH_COLS, cells))
    for r in rows[1:]:
        console.print(cell(r["versus_first"]))


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"
