#!/usr/bin/env python3
"""What the soak monitor costs a board beyond its measuring threads: the
probe in --soak mode as the service runs it (default 5 min windows, 1 ms
interval, the Prometheus textfile written), on this machine or on a board
over SSH, with every thread's CPU time read from /proc at the start and
the end of a steady stretch.

The measuring threads are the SCHED_FIFO ones (a wake-up each interval is
the measurement itself); everything else -- the writer (spike rings,
telemetry once a second, interrupt counters at each boundary, a window's
line, its rollups, the textfile and the storage check at each close) and
the main thread -- is the monitor's cost, printed per hour and as a share
of one core.  CPU time comes from schedstat (ns) where the kernel has it,
else from utime+stime (clock ticks).

Then, side by side, the same stretch of cyclictest at the same interval,
priority and CPUs (`cyclictest -m -S -p 90 -i INTERVAL -q`): the cost of
each whole -- its measuring threads included -- so the monitor's is stated
against the tool users run for the same measurement.

    .venv/bin/python bench/monitor_cost.py [--seconds 600] [--window 5m] [HOST [--ssh-config FILE]]

Needs root (or a board login with sudo), and cyclictest there (rt-tests).
Goal: < 1 % of one core beyond the measuring threads.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rtforge.device import LocalTransport, SshTransport  # noqa: E402
from rtforge.monitor import board  # noqa: E402
from rtforge.monitor.spec import MonitorSpec  # noqa: E402
from rtforge.units import format_span  # noqa: E402

# $1 probe (or "cyclictest"), $2 seconds; then the probe's soak options (or
# cyclictest's).  Prints each thread's "TID SCHEDSTAT_NS|- STAT" at BEGIN
# and END, and the uptime at each.
_SCRIPT = r"""
P=$1 N=$2
shift 2
D=$(mktemp -d /tmp/rtforge-monitor-cost.XXXXXX) || exit 3
mkdir "$D/prom"
if [ "$P" = cyclictest ]; then
    cyclictest "$@" -D "$((N + 10))" >/dev/null 2>"$D/err" &
else
    "$P" --soak --state "$D/mon" --textfile-dir "$D/prom" "$@" >/dev/null 2>"$D/err" &
fi
pid=$!
snap() {
    for t in /proc/$pid/task/*; do
        s=$(cut -d' ' -f1 "$t/schedstat" 2>/dev/null) || s=-
        printf 'task %s %s %s\n' "${t##*/}" "${s:--}" "$(cat "$t/stat")"
    done
    printf 'uptime %s\n' "$(cut -d' ' -f1 /proc/uptime)"
}
sleep 5   # past the start (mlockall, threads, the first files): the steady state is measured
echo BEGIN; snap
sleep "$N"
echo END; snap
n=$(cat "$D"/mon/windows/*.jsonl 2>/dev/null | wc -l)
echo "windows $n"
echo "bytes $(cat "$D"/mon/windows/*.jsonl 2>/dev/null | wc -c)"
kill -TERM "$pid"; wait "$pid"
cat "$D/err" >&2
rm -rf "$D"
"""


@dataclass
class Thread:
    tid: str
    ns: int | None        # schedstat's run time
    ticks: int            # utime + stime
    fifo: bool            # SCHED_FIFO: a measuring thread


def parse(text: str) -> tuple[dict[str, dict[str, Thread]], dict[str, float], int]:
    part, tasks, uptime, windows = None, {"BEGIN": {}, "END": {}}, {}, 0
    for line in text.splitlines():
        if line in ("BEGIN", "END"):
            part = line
        elif line.startswith("task ") and part:
            _, tid, ns, stat = line.split(" ", 3)
            f = stat[stat.rindex(")") + 2:].split()
            # stat fields from 3 (state): utime 14, stime 15, policy 41 -> indexes 11, 12, 38
            tasks[part][tid] = Thread(tid, int(ns) if ns.isdigit() else None, int(f[11]) + int(f[12]), f[38] == "1")
        elif line.startswith("uptime ") and part:
            uptime[part] = float(line.split()[1])
        elif line.startswith("windows "):
            windows = int(line.split()[1])
        elif line.startswith("bytes "):
            uptime["bytes"] = int(line.split()[1])
    return tasks, uptime, windows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("host", nargs="?", help="a board over SSH (default: this machine)")
    ap.add_argument("--ssh-config", type=Path)
    ap.add_argument("--seconds", type=int, default=600, help="the steady stretch measured (default 600)")
    ap.add_argument("--window", default="5m", help="window length (default 5m, the service's)")
    ap.add_argument("--interval-us", default="1000")
    args = ap.parse_args()
    t = SshTransport(args.host, ssh_config=args.ssh_config) if args.host else LocalTransport()
    spec = MonitorSpec.parse(window=args.window, for_=None, interval_us=args.interval_us, priority="90", cpus=None,
                             alert_us=None, textfile_dir=None, state_dir="/unused", keep_days="14", max_mb="100")
    try:
        f = board.facts(t)
        program = board.install_probe(t, f) if args.host else None
        if program is None:
            from rtforge.measure.probebuild import build_probe
            program = str(build_probe())
        opts = spec.argv(program)[4:]  # --window-s ... (the folders are the script's)
        r = t.run(["sh", "-c", _SCRIPT, "sh", program, str(args.seconds), *opts], sudo=True,
                  timeout=args.seconds + 120, step="measuring the monitor's cost")
        ct = t.run(["sh", "-c", _SCRIPT, "sh", "cyclictest", str(args.seconds), "-m", "-S", "-p", str(spec.priority),
                    "-i", str(spec.interval_us), "-q"], sudo=True, timeout=args.seconds + 120,
                   step="measuring cyclictest's cost") if t.which("cyclictest") else None
    finally:
        t.close()
    if r.returncode:
        print(f"the monitor did not run: {r.stderr.strip() or r.returncode}", file=sys.stderr)
        return 2
    tasks, uptime, windows = parse(r.stdout)
    wall = uptime["END"] - uptime["BEGIN"]
    tick = 0.01  # USER_HZ on Linux

    def spent(fifo: bool) -> tuple[float, str]:
        b, e = tasks["BEGIN"], tasks["END"]
        tids = [x for x in e if x in b and e[x].fifo == fifo]
        if all(e[x].ns is not None and b[x].ns is not None for x in tids):
            return sum(e[x].ns - b[x].ns for x in tids) / 1e9, "schedstat"
        return sum(e[x].ticks - b[x].ticks for x in tids) * tick, "clock ticks"

    other, how = spent(False)
    measuring, _ = spent(True)
    nmeas = sum(1 for x in tasks["END"].values() if x.fifo)
    wakeups = nmeas * wall / (spec.interval_us / 1e6)
    where = args.host or "this machine"
    print(f"monitor cost on {where} ({f.machine}, {nmeas} measured CPUs, {spec.interval_us} µs interval, "
          f"{format_span(spec.window_s)} windows, textfile on), {wall:.0f} s steady, {windows} windows closed "
          f"in all; CPU time from {how}:")
    print(f"  beyond the measuring threads: {other:.3f} CPU-s in {wall:.0f} s = {other / wall * 3600:.1f} CPU-s "
          f"per hour = {other / wall * 100:.3f} % of one core (goal < 1 %)")
    print(f"  the measuring threads (for scale): {measuring:.2f} CPU-s, {measuring / wakeups * 1e6:.1f} µs per "
          f"wake-up, {measuring / wall / max(nmeas, 1) * 100:.2f} % of each measured CPU")
    if windows:
        per = uptime["bytes"] / windows
        print(f"  storage: {per / 1024:.1f} KiB per window line = {per * 86400 / spec.window_s / 2**20:.1f} MiB of "
              f"windows per day at this window length")
    whole = other + measuring
    print(f"whole, side by side ({wall:.0f} s each, {nmeas} CPUs, {spec.interval_us} µs, priority {spec.priority}):")
    print(f"  rtforge monitor: {whole:.2f} CPU-s = {whole / wall * 100:.2f} % of one core")
    if ct is None or ct.returncode:
        print("  cyclictest: not measured (" + ("not installed there: apt install rt-tests" if ct is None
                                                else ct.stderr.strip()[-200:]) + ")")
        return 0
    ctasks, cup, _ = parse(ct.stdout)
    cwall = cup["END"] - cup["BEGIN"]
    b, e = ctasks["BEGIN"], ctasks["END"]
    both = [x for x in e if x in b]
    use_ns = all(e[x].ns is not None and b[x].ns is not None for x in both)
    cyc = sum((e[x].ns - b[x].ns) / 1e9 if use_ns else (e[x].ticks - b[x].ticks) * tick for x in both)  # type: ignore[operator]
    print(f"  cyclictest -m -S -p {spec.priority} -i {spec.interval_us}: {cyc:.2f} CPU-s in {cwall:.0f} s = "
          f"{cyc / cwall * 100:.2f} % of one core")
    print(f"  the monitor costs {whole / wall / (cyc / cwall):.2f}x what cyclictest costs for the same wake-ups "
          "(and keeps windows, histograms, rollups and the textfile)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
