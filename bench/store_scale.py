#!/usr/bin/env python3
"""How the run store grows: import, show, label, delete, `runs` and a lost
index's rebuild, timed at several store sizes, side by side.

Each store is made in the real format: real cyclictest outputs from
tests/golden and tests/corpus are imported by rtforge (``import_file``),
then their run folders are copied under new run ids (one every 90 minutes
back from now, eight hosts, four kernels, a label on every tenth run) with
result.json written by rtforge's own model (``RunResult.to_json``) and the
raw files copied beside it; the index is then built once.

Every operation runs in a fresh child process (rtforge's modules imported
before the clock starts), as the command line would: `main([...])`.  A
round imports a new file, shows it, labels it and deletes it, so the store
keeps its size; `runs` is timed on a real 80x24 terminal (a pty), into a
pipe and as `--json`; then the index is deleted and `show last` rebuilds
it.  Per operation: the median wall time over the rounds and the most
memory it added (the child's peak RSS, VmHWM, minus its RSS before);
then the growth between sizes.

--base SRC measures another rtforge beside this one (SRC: its src/ folder,
e.g. `git archive BASE src | tar -x -C /tmp/base`), on a copy of each store
with an index of its own, the two alternating round by round, so that a
busy machine weighs on both alike; a last table gives this ÷ base.

    .venv/bin/python bench/store_scale.py [--sizes 50,500,5000] [--rounds 3] [--base SRC]

Goal (issue 34): at 5,000 runs `runs` on a terminal ≤ 1 s; import, show
and delete within 1.5x their time at 50 runs.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import pty
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
# real outputs, one per format the importers take; each becomes a template run
TEMPLATES = [TESTS / "golden" / "cyclictest" / n for n in ("hist.txt", "run.json", "summary.txt", "nsecs.txt",
                                                            "spike.txt", "recipe.csv")] + \
            [TESTS / "corpus" / "cyclictest" / n for n in ("koen-h400-4t-100M-nort.txt", "civcode-h400-4t.txt")]
IMPORTED = TESTS / "corpus" / "cyclictest" / "chen116-h400-4t.txt"   # the file each round imports anew
HOSTS = [f"pi{n}-{s}" for n in (3, 4, 5, 400) for s in ("lab", "rack")]
KERNELS = ["6.12.25-rt8-v8+", "6.6.78-rt51-v8+", "6.1.77-v8+", "6.12.25-v8+"]
STEP = timedelta(minutes=90)
OPS = ["import", "show", "label", "delete", "runs (terminal)", "runs | cat", "runs --json", "lost index"]


# -- the store -----------------------------------------------------------------
def fill(root: Path, size: int) -> None:
    """A store of `size` runs in the real format (see the module's docstring)."""
    from rtforge.results.importers import import_file
    from rtforge.results.store.runfolder import read_result
    from rtforge.results.store.runstore import Store

    store = Store(root)
    templates = [import_file(path, store) for path in TEMPLATES]
    now = datetime.now(UTC)
    for i in range(size - len(templates)):
        template = templates[i % len(templates)]
        src = store.runs_dir / template.run_id
        result = read_result(src)
        when = now - STEP * (size - i)
        host = HOSTS[i % len(HOSTS)]
        result.run_id = f"{when:%Y%m%d-%H%M%S}-{host}-{i & 0xffff:04x}"
        result.host = host
        result.start_time = when.isoformat(timespec="seconds")
        result.stored_at = (when + timedelta(seconds=result.duration_s or 60)).isoformat(timespec="microseconds")
        result.label = f"batch {i // 10}" if i % 10 == 0 else None
        result.system["kernel_release"] = KERNELS[i % len(KERNELS)]
        # a copy is another run: another source, or `import` would take it for the template's file
        result.source = {**(result.source or {}), "sha256": hashlib.sha256(result.run_id.encode()).hexdigest()}
        dst = store.runs_dir / result.run_id
        shutil.copytree(src / "raw", dst / "raw")
        (dst / "result.json").write_text(result.to_json())
    store.reindex()


# -- one operation, in a child -------------------------------------------------------
def child(out: str, op: str, root: str, argv: list[str]) -> None:
    """Run one command in this process and write its time and added peak memory to `out`."""
    import rtforge.cli.importcmd  # noqa: F401 -- the modules a command loads, before the clock starts
    import rtforge.cli.runs  # noqa: F401
    import rtforge.results.importers  # noqa: F401
    from rtforge.cli import main

    if op == "lost index":
        (Path(root) / "runs.db").unlink()
    rss_before = _status_kb("VmRSS")
    t0 = time.perf_counter()
    status = main([*argv, "--results-dir", root])
    elapsed = time.perf_counter() - t0
    sys.stdout.flush()
    # VmHWM, this process's own high-water mark: getrusage's ru_maxrss keeps the parent's across fork and exec
    peak = _status_kb("VmHWM")
    Path(out).write_text(json.dumps({"s": elapsed, "mem": max(peak - rss_before, 0) * 1024, "status": status}))


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"/proc/self/status has no {field}")


def run_child(op: str, root: Path, argv: list[str], *, tty: bool = False, src: str | None = None) -> tuple[dict, str]:
    """(what the child measured, what it printed); src: the rtforge to run (its src/ folder), else this one."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, __file__, "--child", out.name, op, str(root), *argv]
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "PYTHONPATH")}
        if src:
            env["PYTHONPATH"] = src
        if tty:
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            chunks: list[bytes] = []

            def drain() -> None:
                while True:
                    try:
                        data = os.read(master, 65536)
                    except OSError:
                        return
                    if not data:
                        return
                    chunks.append(data)

            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
            p = subprocess.run(cmd, stdin=slave, stdout=slave, stderr=subprocess.PIPE,
                               env={**env, "TERM": "xterm-256color"})
            os.close(slave)
            reader.join(10)
            os.close(master)
            shown = b"".join(chunks).decode(errors="replace")
        else:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=env)
            shown = p.stdout.decode(errors="replace")
        if p.returncode != 0:
            raise SystemExit(f"{op} failed: {p.stderr.decode(errors='replace')}")
        got = json.loads(Path(out.name).read_text())
        if got["status"] != 0:
            raise SystemExit(f"{op} ended with status {got['status']}: {p.stderr.decode(errors='replace')}")
        return got, shown


def one_round(root: Path, r: int, got: dict[str, list[dict]], shown: dict[str, str], src: str | None) -> None:
    m, out = run_child("import", root, ["import", str(IMPORTED), "--json"], src=src)
    got["import"].append(m)
    run_id = json.loads(out)["run_id"]
    for op, argv in (("show", ["show", run_id]), ("label", ["label", run_id, f"round {r}"]),
                     ("delete", ["delete", run_id, "--yes"])):
        m, shown[op] = run_child(op, root, argv, src=src)
        got[op].append(m)
    for op, argv, tty in (("runs (terminal)", ["runs"], True), ("runs | cat", ["runs"], False),
                          ("runs --json", ["runs", "--json"], False)):
        m, shown[op] = run_child(op, root, argv, tty=tty, src=src)
        got[op].append(m)
    m, _ = run_child("lost index", root, ["show", "last", "--json"], src=src)
    got["lost index"].append(m)


# -- the tables -------------------------------------------------------------------------
def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="50,500,5000", help="store sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per size (the median is shown)")
    ap.add_argument("--base", help="another rtforge's src/ folder, measured beside this one")
    ap.add_argument("--json", type=Path, help="also write every figure to this file")
    a = ap.parse_args()
    a.sizes = [int(s) for s in a.sizes.split(",")]
    if any(s < len(TEMPLATES) for s in a.sizes) or a.rounds < 1:
        ap.error(f"each size must be at least {len(TEMPLATES)}, and --rounds at least 1")
    if a.base and not (Path(a.base) / "rtforge" / "__init__.py").is_file():
        ap.error(f"--base {a.base} holds no rtforge package: give the src/ folder of an rtforge tree")
    return a


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
        return
    a = _args()
    sizes = a.sizes
    import rtforge

    codes: dict[str, str | None] = {"this": None, **({"base": str(Path(a.base).resolve())} if a.base else {})}
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, this: {Path(rtforge.__file__).parent}"
          + (f", base: {codes['base']}" if a.base else "") + f"; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    results: dict[str, dict[int, dict[str, list[dict]]]] = {code: {} for code in codes}
    lines: dict[str, dict[int, int]] = {code: {} for code in codes}
    for size in sizes:
        _measure(size, a, codes, results, lines)
    _print(sizes, a, codes, results, lines)


def _measure(size: int, a: argparse.Namespace, codes: dict[str, str | None],
             results: dict[str, dict[int, dict[str, list[dict]]]], lines: dict[str, dict[int, int]]) -> None:
    """One store of this size, measured by every code in turn (alternating, so both meet the same load)."""
    with tempfile.TemporaryDirectory(prefix="store-scale-") as d:
        roots = {code: Path(d) / code / "results" for code in codes}
        t0 = time.perf_counter()
        fill(roots["this"], size)
        if a.base:   # the same folders; the base builds its own index before the clock starts
            shutil.copytree(roots["this"], roots["base"], symlinks=True, ignore=shutil.ignore_patterns("runs.db"))
            run_child("index", roots["base"], ["runs", "--json"], src=codes["base"])
        print(f"{size:,} runs made in {time.perf_counter() - t0:.1f} s", flush=True)
        got: dict[str, dict[str, list[dict]]] = {code: {op: [] for op in OPS} for code in codes}
        shown: dict[str, dict[str, str]] = {code: {} for code in codes}
        for r in range(a.rounds):
            for code in (list(codes) if r % 2 == 0 else list(codes)[::-1]):
                one_round(roots[code], r, got[code], shown[code], codes[code])
        for code in codes:
            results[code][size] = got[code]
            lines[code][size] = shown[code]["runs (terminal)"].count("\n")


def _print(sizes: list[int], a: argparse.Namespace, codes: dict[str, str | None],
           results: dict[str, dict[int, dict[str, list[dict]]]], lines: dict[str, dict[int, int]]) -> None:
    med = {code: {size: {op: statistics.median(m["s"] for m in ms) for op, ms in got.items()}
                  for size, got in results[code].items()} for code in codes}
    for code in codes:
        mem = {size: {op: max(m["mem"] for m in ms) for op, ms in got.items()} for size, got in results[code].items()}
        print(f"\n== {code}" if a.base else "")
        _table(f"time, median of {a.rounds}", sizes, {op: [med[code][s][op] for s in sizes] for op in OPS}, _time)
        _table("peak memory added (RSS)", sizes, {op: [mem[s][op] for s in sizes] for op in OPS},
               lambda b: f"{b / 2**20:.1f} MB")
        print("lines `runs` printed on an 80x24 terminal: "
              + ", ".join(f"{lines[code][s]:,} at {s:,}" for s in sizes))
    if a.base:
        print("\n== this ÷ base, time (medians)")
        print(f"{'':18}" + "".join(f"{f'{s:,} runs':>11}" for s in sizes))
        for op in OPS:
            print(f"{op:18}" + "".join(f"{med['this'][s][op] / med['base'][s][op]:>10.2f}x" for s in sizes))
    if a.json:
        a.json.write_text(json.dumps({"sizes": sizes, "rounds": a.rounds, "codes": codes, "results": results,
                                      "tty_lines": lines}, indent=1))


def _table(title: str, sizes: list[int], rows: dict[str, list[float]], fmt) -> None:
    """One row per operation: its figure at each size, then the growth from the first size to each other."""
    first = sizes[0]
    print(f"\n{title:18}" + "".join(f"{f'{s:,} runs':>11}" for s in sizes)
          + "".join(f"{f'{s}/{first}':>10}" for s in sizes[1:]))
    for op, values in rows.items():
        print(f"{op:18}" + "".join(f"{fmt(v):>11}" for v in values)
              + "".join(f"{v / max(values[0], 1e-9):>9.2f}x" for v in values[1:]))


def _time(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 10 else f"{s:.1f} s"


if __name__ == "__main__":
    main()
