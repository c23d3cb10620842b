"""The commands that read files, stores and bundles, fuzzed: hypothesis drives
import, runs, show, compare, plot, report and kernel verify with generated
arguments, files (truncated, mutated, binary, huge, not regular), hostile
labels and paths, damaged stores, read-only and full disks.

Properties, for every example:
* the exit status is 0, 2 or 130, and no traceback is printed;
* no file outside the example's own folder changes (a canary folder, and
  the device node that stands in for /dev/null, are watched);
* nothing already stored is lost (every stored run's files stay as they were).

Commands run in-process through ``rtforge.cli.main`` for speed; a few
examples also run as real processes."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtforge.cli import main
from rtforge.results.hist import Histogram
from rtforge.results.model import CpuResult, RunResult
from rtforge.results.store.runstore import Store

from ..support.bootfiles import tiny_pi4_bundle

HERE = Path(__file__).parents[1]
GOLDEN = HERE / "golden" / "cyclictest"
CORPUS = HERE / "corpus" / "cyclictest"
SOURCES = sorted(GOLDEN.glob("*.txt")) + sorted(GOLDEN.glob("*.csv")) + sorted(GOLDEN.glob("*.json")) + [
    CORPUS / "neurorust-h400-rt280-6t.hist", CORPUS / "karthik-rttests-h400-4t-overflow.txt",
    CORPUS / "romansereda-summary-std-4t-redraw.txt", CORPUS / "civcode-blogcsv-rt.csv"]
IS_ROOT = os.geteuid() == 0

HOSTILE_TEXT = st.sampled_from([
    "", " ", "last", "..", "../..", "../../outside", "/etc/passwd", "-", "--help", "-o", "\x1b[2J\x1b]0;x\x07",
    "a|b\nc", "[bold]x[/bold]", "$\\frac$", "\u202eevil", "\udcff", "x" * 300, "20", "2026", "*", "%s%n",
]) | st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=30)


# -- the world each example runs in ----------------------------------------------------------------

def _probe_run(store: Store) -> None:
    """A run with a per-second series and telemetry (what only probe runs have)."""
    hist = Histogram.from_buckets([[9_000, 9_100, 500], [20_000, 20_300, 5], [80_000, 81_000, 1]])
    r = RunResult(run_id=store.new_run_id("pi"), engine="probe", state="complete", host="pi",
                  start_time="2026-01-01T00:00:00+00:00", label="probe", duration_s=3.0,
                  config={"interval_us": 200, "priority": 90, "loads": ["cpu"], "cpus": [0]},
                  system={"kernel_release": "6.12.0-rt", "preempt_model": "rt"},
                  cpus=[CpuResult(0, 506, 9_000, 80_500, 506 * 9_500, 0, hist, spikes=1)],
                  series={"t_s": [1, 2, 3], "cpus": [0], "count": [[168, 169, 169]],
                          "max_ns": [[9_500, 80_500, 20_100]], "overruns": [[0, 0, 0]]},
                  telemetry={"t_s": [1, 2, 3], "temp_mc": {"zone0 cpu": [50_000, 51_000, 52_000]},
                             "freq_khz": {"cpu0": [1_500_000] * 3}, "throttled": [0, 0, 0x50000], "load1": [1.0] * 3})
    store.save(r)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    template = root / "template"
    store = Store(template)
    with contextlib.redirect_stdout(io.StringIO()):
        for name in ("hist.txt", "run.json", "summary.txt", "recipe.csv"):
            assert main(["import", str(GOLDEN / name), "--results-dir", str(template), "--label", name]) == 0
    _probe_run(store)
    canary = root / "outside"
    canary.mkdir()
    (canary / "precious.txt").write_text("keep me")
    bundle = root / "bundle"
    tiny_pi4_bundle(bundle)
    mounts = {}
    if IS_ROOT:  # a read-only and a full disk of our own, each holding a copy of the store
        for name in ("ro", "full"):
            mnt = root / name
            mnt.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
            shutil.copytree(template, mnt / "store")
            mounts[name] = mnt
        with open(mounts["full"] / "filler", "wb") as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        subprocess.run(["mount", "-o", "remount,ro", str(mounts["ro"])], check=True)
    yield {"root": root, "template": template, "canary": canary, "bundle": bundle, "mounts": mounts}
    for mnt in mounts.values():
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def snapshot(folder: Path) -> dict[str, object]:
    """What must not change: every entry's kind and content."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st_ = os.lstat(p)
        if stat.S_ISREG(st_.st_mode):
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p)] = (stat.S_IFMT(st_.st_mode), os.readlink(p) if p.is_symlink() else None)
    return out


def stored(store_dir: Path) -> dict[str, object]:
    runs = store_dir / "runs"
    return {k: v for k, v in snapshot(runs).items()} if runs.is_dir() else {}


class Case:
    """One example's folder: a copy of the store, files and paths of every kind."""

    def __init__(self, world):
        self.world = world
        self.dir = Path(tempfile.mkdtemp(dir=world["root"], prefix="case-"))
        self.store = self.dir / "store"
        shutil.copytree(world["template"], self.store)
        w = self.work = self.dir / "work"
        w.mkdir()
        (w / "existing.html").write_text("old")
        (w / "adir").mkdir()
        os.mkfifo(w / "fifo")
        (w / "link").symlink_to(world["canary"] / "precious.txt")
        # A folder reached through a symbolic link the user named is where
        # they asked for the file: it is followed (a link as the file itself is not).
        (w / "linked").mkdir()
        (w / "dirlink").symlink_to(w / "linked")
        if IS_ROOT:
            os.mknod(w / "devnull", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        (w / "afile").write_text("not a store")

    def path(self, key: str) -> str:
        w = self.work
        return {"new": str(w / "new"), "existing": str(w / "existing.html"), "dir": str(w / "adir"),
                "fifo": str(w / "fifo"), "link": str(w / "link"), "dirlink": str(w / "dirlink" / "x"),
                "dev": str(w / "devnull"), "proc": "/proc/version", "missing": str(w / "no" / "x"),
                "dots": str(w / ".." / "work" / "new2"), "empty": "", "afile": str(w / "afile")}[key]

    def results(self, key: str) -> str:
        m = self.world["mounts"]
        return {"store": str(self.store), "missing": str(self.dir / "nostore"), "file": str(self.work / "afile"),
                "ro": str(m["ro"] / "store") if "ro" in m else str(self.store),
                "full": str(m["full"] / "store") if "full" in m else str(self.store)}[key]


def check(world, case: Case, argv: list[str], results_key: str = "store") -> tuple[int, str, str]:
    """Run argv and assert the three properties."""
    watched = world["canary"]
    before = snapshot(watched)
    stores = [Path(case.results(results_key)), case.store]
    kept = [stored(s) for s in stores]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    assert status in (0, 2, 130), (argv, err.getvalue())
    assert "Traceback" not in err.getvalue(), (argv, err.getvalue())
    if status == 2:
        assert err.getvalue().rstrip("\n").splitlines()[-1].startswith("rtforge: error: "), (argv, err.getvalue())
    assert snapshot(watched) == before, argv
    for s, k in zip(stores, kept):
        after = stored(s)
        assert all(after.get(p) == v for p, v in k.items()), ("a stored run changed", argv)
    if IS_ROOT:
        assert stat.S_ISCHR(os.lstat(case.work / "devnull").st_mode)
    return status, out.getvalue(), err.getvalue()


FUZZ = settings(max_examples=int(os.environ.get("RTFORGE_FUZZ_EXAMPLES", 60)), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
RESULTS = st.sampled_from(["store"] * 6 + ["missing", "file", "ro", "full"])
REFS = st.lists(st.sampled_from(["last", "20", "2026", "<id>", "<id-prefix>"]) | HOSTILE_TEXT, min_size=1, max_size=3)


def _refs(case: Case, refs: list[str]) -> list[str]:
    ids = sorted(p.name for p in (case.store / "runs").iterdir() if not p.name.startswith("."))
    return [ids[len(r) % len(ids)] if r == "<id>" else ids[0][:12] if r == "<id-prefix>" else r for r in refs]


# -- import ------------------------------------------------------------------------------------------

def _mutate(data: bytes, ops) -> bytes:
    for kind, pos, blob in ops:
        pos %= max(1, len(data))
        if kind == 0:
            data = data[:pos]                          # truncated
        elif kind == 1:
            data = data[:pos] + blob + data[pos:]      # inserted
        elif kind == 2:
            data = data[:pos] + blob + data[pos + len(blob):]  # overwritten
        else:
            data = data + data[pos:]                   # glued to a copy of itself
    return data


FILES = st.one_of(
    st.tuples(st.just("mutated"), st.sampled_from(SOURCES),
              st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**6), st.binary(min_size=1, max_size=6)),
                       max_size=4)),
    st.tuples(st.just("binary"), st.binary(max_size=300), st.just(None)),
    st.tuples(st.sampled_from(["fifo", "dir", "link", "dev", "proc", "missing", "huge", "/dev/zero", "empty"]),
              st.none(), st.none()),
)


def _input(case: Case, spec) -> str:
    kind, a, b = spec
    f = case.work / "input.txt"
    if kind == "mutated":
        f.write_bytes(_mutate(a.read_bytes(), b))
    elif kind == "binary":
        f.write_bytes(a)
    elif kind == "huge":
        with open(f, "wb") as h:
            h.truncate((1 << 30) + 7)
    elif kind == "/dev/zero":
        return "/dev/zero"
    elif kind == "empty":
        f.write_bytes(b"")
    else:
        return case.path(kind)
    return str(f)


@pytest.mark.slow
@FUZZ
@given(spec=FILES, label=st.none() | HOSTILE_TEXT, results=RESULTS, as_json=st.booleans())
def test_fuzz_import(world, spec, label, results, as_json):
    if spec[0] == "dev" and not IS_ROOT:
        return
    case = Case(world)
    try:
        argv = ["import", _input(case, spec), "--results-dir", case.results(results)]
        argv += ["--label", label] if label is not None else []
        argv += ["--json"] if as_json else []
        status, out, err = check(world, case, argv, results)
        if status == 0 and results == "store":  # what was imported is listed, once, and shows
            assert check(world, case, ["show", "last", "--results-dir", case.results(results)])[0] == 0
            again = check(world, case, argv, results)
            assert again[0] == 2 and "already imported" in again[2]
    finally:
        shutil.rmtree(case.dir, ignore_errors=True)


# -- runs, show, compare, kernel verify --------------------------------------------------------------

def _damage(case: Case, how: str) -> None:
    runs = sorted(p for p in (case.store / "runs").iterdir() if not p.name.startswith("."))
    victim = runs[len(how) % len(runs)] / "result.json"
    if how == "truncate":
        victim.write_bytes(victim.read_bytes()[:100])
    elif how == "list":
        victim.write_text("[]")
    elif how == "db garbage":
        (case.store / "runs.db").write_bytes(os.urandom(3000))
    elif how == "db gone":
        (case.store / "runs.db").unlink()
    elif how == "escape id":
        doc = json.loads(victim.read_text())
        doc.update(run_id="../../outside", state="running", owner={"pid": 999_999_999, "start_ticks": 1})
        victim.write_text(json.dumps(doc))


DAMAGE = st.sampled_from(["none"] * 4 + ["truncate", "list", "db garbage", "db gone", "escape id"])


@pytest.mark.slow
@FUZZ
@given(command=st.sampled_from(["runs", "show", "compare"]), refs=REFS, results=RESULTS, damage=DAMAGE,
       flags=st.lists(st.sampled_from(["--json", "--reindex"]) | HOSTILE_TEXT, max_size=2))
def test_fuzz_listing_and_showing(world, command, refs, results, damage, flags):
    case = Case(world)
    try:
        _damage(case, damage)
        argv = [command] + ([] if command == "runs" else _refs(case, refs)[: 1 if command == "show" else 3])
        argv += flags + ["--results-dir", case.results(results)]
        status, out, err = check(world, case, argv, results)
        plain = argv == [command, "--results-dir", case.results(results)]
        if damage == "none" and results in ("store", "ro") and plain:
            assert status == 0
    finally:
        shutil.rmtree(case.dir, ignore_errors=True)


JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | HOSTILE_TEXT,
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(HOSTILE_TEXT, kids, max_size=3),
                     max_leaves=8)
MANIFEST_KEYS = st.sampled_from(["board", "arch", "machines", "models", "kernelrelease", "image", "uname_v_marker",
                                 "files", "qemu", "manifest_version"])


@pytest.mark.slow
@FUZZ
@given(edits=st.lists(st.tuples(MANIFEST_KEYS, JSONS | st.sampled_from(["../../etc/passwd", "/etc/passwd"])),
                      max_size=3),
       form=st.sampled_from(["dir", "tar.gz", "cut tar.gz", "tar", "garbage"]), cut=st.integers(0, 10**6))
def test_fuzz_kernel_verify(world, edits, form, cut):
    case = Case(world)
    try:
        b = case.dir / "bundle"
        shutil.copytree(world["bundle"], b)
        m = json.loads((b / "manifest.json").read_text())
        for key, value in edits:
            m[key] = value
        (b / "manifest.json").write_text(json.dumps(m))
        target = b
        if form != "dir":
            import tarfile
            target = case.dir / ("b.tar" if form == "tar" else "b.tar.gz")
            with tarfile.open(target, "w" if form == "tar" else "w:gz") as tar:
                for p in sorted(b.iterdir()):
                    tar.add(p, arcname=p.name)
            if form == "cut tar.gz":
                data = target.read_bytes()
                target.write_bytes(data[: cut % len(data)])
            elif form == "garbage":
                target.write_bytes(os.urandom(cut % 2000))
        status, _, err = check(world, case, ["kernel", "verify", str(target)])
        if not edits and form in ("dir", "tar.gz", "tar"):
            assert status == 0, err
    finally:
        shutil.rmtree(case.dir, ignore_errors=True)


# -- plot and report (matplotlib: fewer examples) ----------------------------------------------------

OUT = st.sampled_from(["new", "existing", "dir", "fifo", "link", "dirlink", "dev", "proc", "missing", "dots", "empty"])


@pytest.mark.slow
@settings(FUZZ, max_examples=int(os.environ.get("RTFORGE_FUZZ_EXAMPLES", 60)) // 4)
@given(command=st.sampled_from(["plot", "report"]), refs=REFS, out=OUT, results=RESULTS, damage=DAMAGE,
       kind=st.sampled_from(["hist", "timeline", "cdf", "compare"]), fmt=st.sampled_from(["html", "md"]),
       suffix=st.sampled_from([".svg", ".png", ".html", ".md", ""]),
       cycle=st.none() | st.sampled_from(["1ms", "250us", "0", "-1", "1e999ms", "nan", "10s"]) | HOSTILE_TEXT)
def test_fuzz_plot_and_report(world, command, refs, out, results, damage, kind, fmt, suffix, cycle):
    if out == "dev" and not IS_ROOT:
        return
    case = Case(world)
    try:
        _damage(case, damage)
        target = case.path(out)
        target = target + suffix if out in ("new", "dots", "missing") else target
        argv = [command, *_refs(case, refs), "-o", target, "--results-dir", case.results(results)]
        argv += ["--kind", kind] if command == "plot" else ["--format", fmt] + (["-C", cycle] if cycle else [])
        status, _, err = check(world, case, argv, results)
        if out in ("fifo", "link", "dev", "dir", "proc") and not any(a.startswith("-") for a in refs):
            assert status == 2, (argv, err)  # (an option among the runs, --help say, ends it earlier)
        if out == "dirlink" and status == 0 and "--help" not in refs:   # --help among the runs: help, no file
            assert (case.work / "linked" / "x").is_file() and (case.work / "dirlink").is_symlink(), argv
    finally:
        shutil.rmtree(case.dir, ignore_errors=True)


# -- symbolic link loops (issue 22 item 8) ------------------------------------------------------------

def _loop(where: Path, kind: str) -> Path:
    """A real loop of symbolic links: one link to itself, or two to each other."""
    where.mkdir(parents=True, exist_ok=True)
    if kind == "self":
        (where / "loop").symlink_to("loop")
        return where / "loop"
    (where / "a").symlink_to("b")
    (where / "b").symlink_to("a")
    return where / "a"


def _loop_argv(case: Case, command: str, kind: str) -> list[str]:
    if command == "bootcheck":          # config.txt itself a loop
        boot = case.dir / "boot"
        boot.mkdir()
        (boot / "config.txt").symlink_to(_loop(boot, kind).name)
        return ["bootcheck", str(boot), "-m", "pi4"]
    if command == "bootcheck include":  # a file config.txt includes
        boot = case.dir / "boot"
        _loop(boot / "sub", kind)
        (boot / "config.txt").write_text(f"include sub/{'loop' if kind == 'self' else 'a'}\nkernel=k.img\n")
        return ["bootcheck", str(boot), "-m", "pi4", "--json"]
    if command == "doctor":
        return ["doctor", "--sysroot", str(_loop(case.dir, kind)), "--window-s", "0"]
    if command == "kernel source":
        return ["kernel", "source", f"dir:{_loop(case.dir, kind)}"]
    return ["latency", "--duration", "1s", "--results-dir", str(_loop(case.dir, kind))]


@pytest.mark.parametrize("kind", ["self", "pair"])
@pytest.mark.parametrize("command", ["bootcheck", "bootcheck include", "doctor", "kernel source", "latency"])
def test_a_symlink_loop_is_one_sentence(world, command, kind):
    """Path.resolve() raises RuntimeError on a loop (Python 3.11): these
    ended in a traceback.  Each is one sentence naming the loop, exit 2."""
    if command == "latency" and not IS_ROOT:
        pytest.skip("latency refuses a user without real-time privileges before it opens the store")
    case = Case(world)
    try:
        status, out, err = check(world, case, _loop_argv(case, command, kind))
        assert status == 2 and "loop of symbolic links" in err and len(err.strip().splitlines()) == 1, err
    finally:
        shutil.rmtree(case.dir, ignore_errors=True)


# -- a few real processes ----------------------------------------------------------------------------

@pytest.mark.parametrize("limit", [None, 2048])
@pytest.mark.slow
def test_real_processes_with_hostile_input(world, limit):
    """The installed command, run as a process (with and without a file size limit)."""
    case = Case(world)

    def preexec():
        if limit:
            import resource
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        rd = ["--results-dir", str(case.store)]
        before = snapshot(world["canary"])
        kept = stored(case.store)
        argvs = [["import", str(CORPUS / "koen-h400-4t-duplicated-concat.txt"), *rd],
                 ["import", str(CORPUS / "amro-h10000-3t.txt"), "--label", "\x1b[2Jcleared?", *rd],
                 ["runs", *rd], ["show", "last", *rd],
                 ["report", "last", "-o", case.path("link"), *rd],
                 ["report", "last", "-f", "md", "-o", str(case.work / "r.md"), *rd],
                 ["plot", "last", "-o", case.path("fifo"), *rd],
                 ["kernel", "verify", "/proc/version"]]
        for argv in argvs:
            p = subprocess.run([sys.executable, "-m", "rtforge", *argv], capture_output=True, timeout=300,
                               preexec_fn=preexec)
            assert p.returncode in (0, 2, 130) and b"Traceback" not in p.stderr, (argv, p.stderr)
            assert b"\x1b" not in p.stdout + p.stderr, argv
        assert snapshot(world["canary"]) == before
        assert all(stored(case.store).get(k) == v for k, v in kept.items())
        assert not [p for p in case.work.iterdir() if p.name.startswith(".")]  # no temporary file left
    finally:
        shutil.rmtree(case.dir, ignore_errors=True)
