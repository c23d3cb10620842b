"""rtforge monitor …: soak monitoring on a board (or here) -- run in the
foreground, start/stop/status of the service, fetch into the store -- and
rtforge trend: the long-term view across days and kernels with the
promotion rule (docs/monitoring.md)."""

from __future__ import annotations

import json
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import typer

from .. import paths
from ..device import LocalTransport, SshTransport
from ..errors import UserError
from ..results.soak.folder import find_host
from ..results.soak.promotion import Rule
from ..results.soak.windows import Window, parse_window
from ..results.store.runstore import Store
from ..units import format_span, format_us, parse_span_s, plural, shown
from .common import HOST_OPTIONAL, RESULTS_DIR, SSH_CONFIG, err_console
from .render import make_console

app = typer.Typer()
monitor_app = typer.Typer(no_args_is_help=True, help="Soak monitoring: windowed maxima for days and months, "
                          "as a service on a board, with Prometheus metrics.")
app.add_typer(monitor_app, name="monitor")

WINDOW = typer.Option("5m", "--window", "-w", metavar="DURATION", help="window length: 5m (OSADL's), 60s, 1h")
INTERVAL = typer.Option("1000", "--interval-us", "-i", metavar="INTEGER", help="wake-up period in µs")
PRIORITY = typer.Option("90", "--priority", "-p", metavar="INTEGER", help="SCHED_FIFO priority (1-99)")
CPUS = typer.Option(None, "--cpus", "-c", metavar="CPUS", help="CPUs to measure, e.g. 0-3,6 (default: all)")
ALERT = typer.Option(None, "--alert-us", metavar="INTEGER", help="keep evidence of windows whose max is over this "
                     "(their worst spikes; rtla's analysis where the kernel traces)")
TEXTFILE = typer.Option(None, "--textfile-dir", metavar="DIR", help="write DIR/rtforge.prom for node_exporter's "
                        "textfile collector (start: Debian's folder when it exists)")
STATE = typer.Option(None, "--state-dir", metavar="DIR", help="the monitor's folder (default /var/lib/rtforge-monitor)")
KEEP = typer.Option("14", "--keep-days", metavar="INTEGER", help="days of windows kept on the board")
CAP = typer.Option("100", "--max-mb", metavar="INTEGER", help="the folder's size cap in MiB")


def _transport(host: str | None, ssh_config: Path | None):
    if host is None or host == "local":
        if ssh_config is not None:
            raise UserError("--ssh-config is for a board: name it first, e.g. rtforge monitor start HOST "
                            "--ssh-config FILE")
        return LocalTransport()
    return SshTransport(host, ssh_config=ssh_config)


def _default_state(host: str | None) -> str:
    from ..monitor.spec import STATE_DIR, local_state_dir
    return str(local_state_dir()) if host in (None, "local") else STATE_DIR


def _steps():
    err = err_console()
    return (lambda s: err.print(s, style="dim")) if sys.stderr.isatty() else (lambda s: None)


def _spec(host, *, window, for_, interval_us, priority, cpus, alert_us, textfile_dir, state_dir, keep_days, max_mb):
    from ..monitor.spec import MonitorSpec
    return MonitorSpec.parse(window=window, for_=for_, interval_us=interval_us, priority=priority, cpus=cpus,
                             alert_us=alert_us, textfile_dir=textfile_dir,
                             state_dir=state_dir or _default_state(host), keep_days=keep_days, max_mb=max_mb)


def _utc(ns: int, fmt: str = "%H:%M:%S") -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime(fmt)


def window_line(w: Window) -> str:
    """One closed window in at most 80 columns: when, the worst wake-up and
    its CPU, then what an operator looks for (overruns, an alert, a partial
    window, the temperature -- dropped first when the line is full)."""
    worst = max((c for c in w.cpus if c.max_ns is not None), key=lambda c: c.max_ns or 0, default=None)
    most = f"max {format_us(worst.max_ns):>8} µs (CPU {worst.cpu})" if worst and worst.max_ns is not None \
        else "no wake-up"
    notes = []
    if w.overruns:
        notes.append(plural(w.overruns, "overrun"))
    if w.alert:
        notes.append("ALERT")
    if w.partial:
        notes.append("partial")
    temps = [t for t in w.tel.get("temp_max_mc") or [] if isinstance(t, int)]
    line = f"{_utc(w.start_ns)}–{_utc(w.end_ns)}  {most}"
    for extra in (notes, [f"{max(temps) / 1000:.0f} °C"] if temps else []):
        if extra and len(line) + 2 + len(" ".join(extra)) <= 80:
            line += "  " + " ".join(extra)
    return line


def event_line(e: dict) -> str | None:
    """What a user should see of the probe's events, while it runs."""
    kind = e.get("event")
    if kind == "gap" and isinstance(e.get("seconds"), (int, float)):
        why = "a reboot" if e.get("reboot") else "a restart"
        how = "" if e.get("clean") else ", and the monitor before it did not stop cleanly (a crash or power loss?)"
        return f"gap: {format_span(max(0, e['seconds']))} not measured since the last window ({why}{how})"
    if kind == "kernel" and isinstance(e.get("from"), dict) and isinstance(e.get("to"), dict):
        return f"kernel changed: {shown(str(e['from'].get('release')))} → {shown(str(e['to'].get('release')))}"
    if kind == "rotated":
        return f"storage: removed {shown(str(e.get('removed')), 80)} ({shown(str(e.get('why')))})"
    if kind == "over_cap":
        return "storage: over --max-mb even after removing every old file: raise it"
    return None


@monitor_app.command("run")
def run_cmd(
    host: str | None = typer.Argument(None, help=HOST_OPTIONAL),
    window: str = WINDOW,
    for_: str | None = typer.Option(None, "--for", metavar="DURATION", help="stop after this long, e.g. 30s, "
                                       "10m, 2h (default: until Ctrl-C)"),
    interval_us: str = INTERVAL, priority: str = PRIORITY, cpus: str | None = CPUS,
    alert_us: str | None = ALERT, textfile_dir: str | None = TEXTFILE, state_dir: str | None = STATE,
    keep_days: str = KEEP, max_mb: str = CAP, ssh_config: Path | None = SSH_CONFIG,
) -> int:
    """Measure in windows in the foreground: what the service runs; Ctrl-C ends it and keeps every window."""
    from ..monitor import live

    spec = _spec(host, window=window, for_=for_, interval_us=interval_us, priority=priority, cpus=cpus,
                 alert_us=alert_us, textfile_dir=textfile_dir, state_dir=state_dir, keep_days=keep_days,
                 max_mb=max_mb)
    transport = _transport(host, ssh_config)
    out = make_console()
    err = err_console()

    def started(lv) -> None:
        for note in lv.notes:
            err.print(f"note: {shown(note, 300)}", highlight=False)
        span = f" for {format_span(spec.duration_s)}" if spec.duration_s else "; Ctrl-C ends it"
        err.print(f"monitoring {shown(lv.host)} in {format_span(spec.window_s)} windows{span} "
                  f"(times UTC; kept in {shown(spec.state_dir, 200)})", highlight=False)

    def event(e: dict) -> None:
        if line := event_line(e):
            err.print(line, highlight=False)

    try:
        result = live.run(transport, spec, on_window=lambda w: out.print(window_line(w), highlight=False),
                          on_step=_steps(), on_start=started, on_event=event)
    finally:
        transport.close()
    where = "" if isinstance(transport, LocalTransport) else f" {host}"
    # the command as it works: a folder of one's own is named in it, else fetch reads the default one
    folder = f" --state-dir {shlex.quote(spec.state_dir)}" if state_dir else ""
    err.print(f"{plural(len(result.windows), 'window')} kept in {shown(spec.state_dir, 200)}"
              f"{'' if not where else ' on' + where}: `rtforge monitor fetch{where}{shown(folder, 200)}` brings "
              "them into the store", highlight=False)
    return 130 if result.interrupted else 0


@monitor_app.command()
def start(
    host: str | None = typer.Argument(None, help=HOST_OPTIONAL),
    window: str = WINDOW, interval_us: str = INTERVAL, priority: str = PRIORITY, cpus: str | None = CPUS,
    alert_us: str | None = ALERT, textfile_dir: str | None = TEXTFILE, state_dir: str | None = STATE,
    keep_days: str = KEEP, max_mb: str = CAP, ssh_config: Path | None = SSH_CONFIG,
    dry_run: bool = typer.Option(False, "--dry-run", help="check everything and print the unit and each change "
                                 "it would make, changing nothing"),
) -> None:
    """Install the probe and rtforge-monitor.service, enable it at boot and start it."""
    from ..monitor import service

    spec = _spec(host, window=window, for_=None, interval_us=interval_us, priority=priority, cpus=cpus,
                 alert_us=alert_us, textfile_dir=textfile_dir, state_dir=state_dir or service.STATE_DIR,
                 keep_days=keep_days, max_mb=max_mb)
    transport = _transport(host, ssh_config)
    try:
        f, notes, changes = service.start(transport, spec, on_step=_steps(), dry_run=dry_run)
    finally:
        transport.close()
    err = err_console()
    for note in notes:
        err.print(f"note: {shown(note, 300)}", highlight=False)
    where = transport.name   # "this machine", or the board as the user named it
    if dry_run:
        out = make_console()
        out.print(f"`rtforge monitor start` would, on {shown(where)} ({shown(f.hostname)}), changing nothing now:",
                  highlight=False)
        for i, change in enumerate(changes, 1):
            out.print(f"  {i}. {shown(change, 300)}", highlight=False)
        out.print(f"\n{service.UNIT_PATH}:", highlight=False)
        out.print(service.unit_text(spec), highlight=False, markup=False, end="")
        return
    make_console().print(f"{service.UNIT} runs on {shown(where)} ({shown(f.hostname)}): "
                         f"{format_span(spec.window_s)} windows into {shown(spec.state_dir, 200)}, started at boot",
                         highlight=False)


@monitor_app.command()
def stop(
    host: str | None = typer.Argument(None, help=HOST_OPTIONAL),
    uninstall: bool = typer.Option(False, "--uninstall", help="also remove the service and the probe "
                                   "(the windows stay)"),
    ssh_config: Path | None = SSH_CONFIG,
) -> None:
    """Stop and disable the service; its windows stay on the board for `monitor fetch`."""
    from ..monitor import service

    transport = _transport(host, ssh_config)
    try:
        done = service.stop(transport, uninstall=uninstall)
    finally:
        transport.close()
    where = transport.name   # "this machine", or the board as the user named it
    if not done:
        raise UserError(f"no {service.UNIT} on {shown(where)}: nothing to stop")
    make_console().print(f"{service.UNIT} stopped on {shown(where)}{' and removed' if uninstall else ''}; "
                         "its windows stay in its folder", highlight=False)


def _status_doc(st, state_dir: str) -> dict:
    last = None
    if st.last:
        try:
            last = parse_window(json.loads(st.last))
        except ValueError:
            last = None
    gaps = [json.loads(g) for g in st.gaps if g.startswith("{")]
    svc = st.service
    running = svc.get("ActiveState") == "active" or st.alive
    return {
        "running": running, "service": svc.get("ActiveState") if svc.get("LoadState") == "loaded" else None,
        "since": svc.get("ActiveEnterTimestamp") or None if svc.get("ActiveState") == "active" else None,
        "pid": int(st.state["pid"]) if running and st.state.get("pid", "").isdigit() else None,
        "started_ns": int(st.state["started_ns"]) if st.state.get("started_ns", "").isdigit() else None,
        "kernel": st.state.get("release"), "window_s": st.state.get("window_s"), "state_dir": state_dir,
        "windows": st.windows, "last_window": None if last is None else {
            "start_ns": last.start_ns, "end_ns": last.end_ns, "max_ns": last.max_ns, "partial": last.partial},
        "gaps": len(gaps), "last_gap": gaps[-1] if gaps else None,
        "used_bytes": None if st.used_kb is None else st.used_kb * 1024,
    }


@monitor_app.command()
def status(
    host: str | None = typer.Argument(None, help=HOST_OPTIONAL),
    state_dir: str | None = STATE, ssh_config: Path | None = SSH_CONFIG,
    as_json: bool = typer.Option(False, "--json", help="print the status as JSON"),
) -> None:
    """Running or not, since when, windows recorded, the last window's max, gaps, storage used."""
    from ..monitor import service

    folder = state_dir or _default_state(host)
    transport = _transport(host, ssh_config)
    try:
        doc = _status_doc(service.status(transport, folder), folder)
    finally:
        transport.close()
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    out = make_console()
    where = transport.name   # "this machine", or the board as the user named it
    if doc["running"]:
        since = doc["since"] or (_utc(doc["started_ns"], "%Y-%m-%d %H:%M:%S UTC") if doc["started_ns"] else "?")
        how = "as rtforge-monitor.service" if doc["service"] == "active" else "in the foreground"
        out.print(f"monitor on {shown(where)}: running {how} since {shown(since)} (pid {doc['pid']})", highlight=False)
    else:
        svc = f" (the service is {doc['service']})" if doc["service"] else " (no service installed)"
        out.print(f"monitor on {shown(where)}: not running{svc}", highlight=False)
    if doc["kernel"] is None and not doc["windows"]:
        at = "" if isinstance(transport, LocalTransport) else f" {host}"
        out.print(f"no monitor has written {shown(folder, 200)} yet: `rtforge monitor start{at}` starts one",
                  highlight=False)
        return
    out.print(f"kernel {shown(doc['kernel'] or '?')}, folder {shown(folder, 200)}", highlight=False)
    lw = doc["last_window"]
    last = (f"; the last, {_utc(lw['start_ns'], '%Y-%m-%d %H:%M:%S')}–{_utc(lw['end_ns'])} UTC: max "
            f"{format_us(lw['max_ns'], unit=True)}" if lw and lw["max_ns"] is not None else "")
    out.print(f"windows recorded: {doc['windows']:,}{last}", highlight=False)
    g = doc["last_gap"]
    gap = (f"; the last: {format_span(max(0, g.get('seconds', 0)))} before "
           f"{_utc(g['to_ns'], '%Y-%m-%d %H:%M UTC')}, {'a reboot' if g.get('reboot') else 'a restart'}"
           f"{'' if g.get('clean') else ' after an unclean end'}" if isinstance(g, dict) and
           isinstance(g.get("to_ns"), int) else "")
    out.print(f"gaps: {doc['gaps']}{gap}", highlight=False)
    if doc["used_bytes"] is not None:
        out.print(f"storage used: {doc['used_bytes'] / 2**20:.1f} MiB", highlight=False)


@monitor_app.command()
def fetch(
    host: str | None = typer.Argument(None, help=HOST_OPTIONAL),
    state_dir: str | None = STATE, ssh_config: Path | None = SSH_CONFIG,
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print what was fetched as JSON"),
) -> None:
    """Bring the monitor's windows, hours, days, events and evidence into the store (only what is new)."""
    from ..monitor.fetch import fetch as do_fetch

    store = Store(results_dir)
    transport = _transport(host, ssh_config)
    try:
        r = do_fetch(transport, store.root, state_dir or _default_state(host), on_step=_steps())
    finally:
        transport.close()
    if as_json:
        print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in r.__dict__.items()}, indent=1))
        return
    span = (f", {_utc(r.first_ns, '%Y-%m-%d %H:%M')} to {_utc(r.last_ns, '%Y-%m-%d %H:%M UTC')}"
            if r.first_ns and r.last_ns else "")
    make_console().print(f"{shown(r.host)}: {r.new_windows:,} new windows ({r.windows:,} in the store{span}), "
                         f"{plural(r.gaps, 'gap')}, {plural(r.new_events, 'new event')}", highlight=False)
    if r.bad_lines:
        err_console().print(f"{r.bad_lines} lines from the board were no monitor records and were skipped")


@app.command()
def trend(
    host: list[str] = typer.Argument(..., help="board(s): the name `monitor fetch` stored, or the HOST fetched from"),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the plot: .svg or .png"),
    min_span: str = typer.Option("30d", "--min-span", metavar="DURATION", help="the rule's days a kernel must run"),
    min_windows: str = typer.Option("8000", "--min-windows", metavar="INTEGER", help="the rule's windows"),
    margin_pct: str = typer.Option("10", "--margin-pct", metavar="INTEGER", help="the rule's tolerance: p99.99 and "
                                   "max at most this % above the kernel before"),
    since: str | None = typer.Option(None, "--since", metavar="WHEN", help="from this UTC date or time "
                                     "(2026-03-01, 2026-03-01T12:00), or this long ago (30d)"),
    until: str | None = typer.Option(None, "--until", metavar="WHEN", help="up to this UTC date or time, or this "
                                     "long ago"),
    results_dir: Path | None = RESULTS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the kernels and the verdict as JSON"),
) -> int:
    """The long-term view (max per window over days, kernel changes marked) and the promotion rule's verdict.

    Exit status 1 when the newest kernel of a board shows a regression (a "no",
    for a nightly job to gate on), 0 otherwise."""
    rule = Rule(min_days=parse_span_s(min_span, "--min-span", "30d, 7d, 12h") / 86400,
                min_windows=_count("--min-windows", min_windows), margin=_count("--margin-pct", margin_pct) / 100)
    since_ns, until_ns = _when_ns("--since", since), _when_ns("--until", until)
    if since_ns is not None and until_ns is not None and until_ns <= since_ns:
        raise UserError(f"--until {shown(until or '')} is not after --since {shown(since or '')}")
    store = Store(results_dir)
    if output is not None:
        paths.check_output(output)
        if output.suffix.lower() not in (".svg", ".png"):
            raise UserError(f"--output {shown(str(output))}: name a .svg or .png file")
    from ..report.trend import draw_trend, load_trend, trend_rows

    folders = [find_host(store.root, name) for name in host]     # every name checked before any is read
    fig, rows = trend_rows(len(folders)) if output is not None else (None, [])
    trends = []
    for i, folder in enumerate(folders):   # one board's windows and hours at a time
        t = load_trend(folder.path, folder.host, rule, since_ns, until_ns)
        if fig is not None:
            draw_trend(rows[i], t)
        trends.append(t.light())
    if as_json:
        print(json.dumps([{"host": t.host, "windows": t.window_count, "rule": rule.text(),
                           "verdict": {"status": t.verdict.status, "line": t.verdict.line},
                           "kernels": [{"release": s.release, "version": s.version, "first_ns": s.first_ns,
                                        "last_ns": s.last_ns, "windows": s.windows, "days": round(s.days, 3),
                                        "p9999_ns": s.p9999_ns, "max_ns": s.max_ns, "alerts": s.alerts,
                                        "unclean_restarts": s.unclean} for s in t.spans]} for t in trends], indent=1))
    else:
        _print_trends(trends, rule)
    if output is not None and fig is not None:
        from ..report.plotting import render
        paths.write_output(output, render(fig, output.suffix.lower()[1:]))
        err_console().print(f"wrote {shown(str(output))}", highlight=False)
    return 1 if any(t.verdict.status == "regression" for t in trends) else 0


def _when_ns(option: str, text: str | None) -> int | None:
    """A UTC date or time (2026-03-01, 2026-03-01T12:00), or a span back from now (30d), as Unix ns."""
    if text is None:
        return None
    t = text.strip()
    try:
        when = datetime.fromisoformat(t)
    except ValueError:
        try:
            back = parse_span_s(t, option, "2026-03-01, 2026-03-01T12:00, 30d")
        except UserError:
            raise UserError(f"{option} '{shown(text)}' is neither a UTC date or time (2026-03-01, "
                            "2026-03-01T12:00) nor a span back from now (30d, 12h)") from None
        return time.time_ns() - round(back * 1e9)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return round(when.timestamp() * 1e9)


def _count(option: str, text: str) -> int:
    t = text.strip()
    if not t.isascii() or not t.isdigit() or int(t) > 10**9:
        raise UserError(f"{option} '{shown(text)}' is not a whole number")
    return int(t)


def _print_trends(trends, rule: Rule) -> None:
    from .render import Col, fitted

    out = make_console()
    cols = [Col("kernel", key=True, wrap=True, min_width=16), Col("days", key=True, right=True),
            Col("windows", key=True, right=True), Col("p99.99 µs", key=True, right=True),
            Col("max µs", key=True, right=True), Col("alerts", drop=2, right=True),
            Col("unclean", drop=1, right=True)]
    out.print(f"promotion rule: {rule.text()}", highlight=False)
    for t in trends:
        out.print(f"\n{shown(t.host)}: {plural(t.window_count, 'window')}, {plural(len(t.gaps), 'gap')}, "
                  f"{plural(len(t.changes), 'kernel change')}", highlight=False)
        rows = [[s.label, f"{s.days:.1f}", f"{s.windows:,}", format_us(s.p9999_ns, unknown="?"),
                 format_us(s.max_ns, unknown="?"), str(s.alerts), str(s.unclean)]
                for s in t.spans]
        if rows:
            out.print(fitted(out, cols, rows))
        out.print(shown(t.verdict.line, 400), highlight=False)
        for where, why in t.damaged[:3]:
            err_console().print(f"skipped {shown(where, 200)}: {shown(why, 200)}", highlight=False)
