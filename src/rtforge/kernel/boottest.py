"""Boot a built kernel in QEMU before it goes near a board.

The kernel boots with an initramfs holding only rtforge's /init and the
statically cross-built probe, both built for the board's own CPU (its
`uname -m`: armv6l for a Pi 1, whose ARM1176 dies of SIGILL on ARMv7 code).
/init prints uname, /sys/kernel/realtime and the page size, loads the
modules given to the test (`modules`, e.g. one built against the bundle's
headers), runs the probe for a few seconds and prints its files between
markers on the serial console; the host reads them from QEMU's output.  A
machine passes only if `uname -v` shows the bundle's RT marker (and
/sys/kernel/realtime is 1 where the kernel has that file: RT-patched kernels
do, mainline does not), the page size is the one the bundle's .config chose
(4K, 16K or 64K on arm64), and every module loaded and is in /proc/modules.

A board's kernel is tested on each machine its board file names (a Pi 3/4
kernel on raspi3b, raspi3ap and raspi4b), with the machine's quirks appended
to the command line.  A failure says what happened -- a panic (its line and
the faulting function), silence, or the last line before a stall -- and the
whole console log is kept.  The probe's run is stored, labelled emulated:
inside TCG its latencies are emulation noise, and every view of it says so.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .. import paths, tools
from ..device.deploy.bundle import Bundle
from ..device.deploy.manifest import kernel_problems
from ..errors import UserError
from ..measure.lifecycle import store_ended
from ..measure.probebuild import CROSS, build_probe, build_program
from ..results.model import RunResult
from ..results.store.runstore import Store
from . import aarch32, initramfs
from .boards import get_board
from .console import Diagnosis, diagnose, explain_stop

QEMU = {"arm64": "qemu-system-aarch64", "arm": "qemu-system-arm", "x86_64": "qemu-system-x86_64"}
PANIC_GRACE_S = 2.0      # after a panic line, the rest of the oops still arrives


@dataclass
class BootTest:
    machine: str
    passed: bool
    sentence: str
    uname_r: str | None = None
    uname_v: str | None = None
    realtime: str | None = None
    run_id: str | None = None
    seconds: float = 0.0
    console_log: Path | None = None
    diagnosis: Diagnosis | None = None
    stand_in: bool = False
    quirks: dict[str, str] = field(default_factory=dict)   # what the boot added for QEMU's gaps -> why
    page_size: int | None = None                           # what the guest's user space got
    modules: dict[str, str] = field(default_factory=dict)  # module file -> "loaded" or the error


def machines_of(manifest: dict) -> list[dict]:
    """The machines a bundle can be boot-tested on (bundles before format
    `emulated` recorded one `qemu` machine).  QEMU's own options come only
    from rtforge's board files, never from a manifest: a bundle may come from
    anywhere, and QEMU runs here as root."""
    if "emulated" in manifest:
        listed = list(manifest["emulated"] or [])
    else:
        q = manifest.get("qemu")
        listed = [{"machine": q["machine"], "what": q["machine"], "stand_in": False, "cpu": q.get("cpu", ""),
                   "append": q.get("append", ""), "quirks": {}, "dtb": q.get("dtb")}] if q else []
    try:
        trusted = {e.machine: e.qemu_args() for e in get_board(manifest["board"]).emulated}
    except UserError:
        trusted = {}
    return [{**q, "qemu_args": trusted.get(q["machine"], []), "quirks": _texts(q.get("quirks"))} for q in listed]


def _texts(quirks) -> dict[str, str]:
    """A manifest's quirks as text: only ever shown, never run."""
    return {str(k): str(v) for k, v in quirks.items()} if isinstance(quirks, dict) else {}


def program_machine(manifest: dict) -> str:
    """The `uname -m` the board's programs are built for: the board's own."""
    machines = manifest.get("machines") or []
    if not machines:
        raise UserError("the bundle's manifest names no machine (uname -m): rebuild it with rtforge kernel build")
    return machines[0]


def qemu_exe(arch: str, machine: str) -> str:
    return "qemu-system-aarch64" if machine in aarch32.AARCH64_MACHINES else QEMU[arch]


def needs(bundle: Bundle, machines: list[dict]) -> list[str]:
    """Everything the boot tests will run, for one check before any of them."""
    m = bundle.manifest
    exes = [qemu_exe(m["arch"], q["machine"]) for q in machines]
    target = program_machine(m)
    cc = [CROSS[target][0]] if target in CROSS and target != os.uname().machine else ["gcc"]
    stub = [aarch32.ASSEMBLER] if any(aarch32.needs_entry(m["arch"], q["machine"]) for q in machines) else []
    return exes + cc + stub


def qemu_argv(bundle: Bundle, q: dict, kernel: Path, initrd: Path, probe_s: int) -> list[str]:
    arch = bundle.manifest["arch"]
    append = " ".join(filter(None, [q.get("append") or "console=ttyAMA0", "panic=-1", "oops=panic",
                                    f"rtforge.probe_s={probe_s}", "rdinit=/init"]))
    argv = [qemu_exe(arch, q["machine"]), "-M", q["machine"], "-nographic", "-no-reboot", "-monitor", "none",
            "-serial", "stdio", "-kernel", str(kernel), "-initrd", str(initrd), "-append", append]
    if q.get("cpu"):
        argv += ["-cpu", q["cpu"]]
    argv += list(q.get("qemu_args") or [])
    if q["machine"] in ("virt", "q35"):
        argv += ["-m", "512", "-smp", "2"]  # raspi machines have fixed memory and CPUs
    if q.get("dtb"):
        dtb = bundle.member("boot/" + Path(q["dtb"]).name)
        argv += ["-dtb", str(dtb)]
    return argv


def _sections(text: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r"RTFORGE-BEGIN (\S+)\r?\n(.*?)\r?\nRTFORGE-END \1", text, re.S)}


def _field(text: str, name: str) -> str | None:
    m = re.search(rf"^RTFORGE-{name} (.*?)\r?$", text, re.M)
    return m[1] if m else None


def module_results(text: str) -> dict[str, str]:
    """/init's `RTFORGE-INSMOD <file> <errno> <strerror>` lines: file ->
    "loaded" or the error.  The error is named from the number, not read
    from the line: an RT kernel prints from a thread of its own, so the
    kernel's reason ("version magic ... should be ...") can land inside
    that line on the console, before its newline."""
    return {m[1]: "loaded" if m[2] == "0" else os.strerror(int(m[2]))
            for m in re.finditer(r"^RTFORGE-INSMOD (\S+) (\d+)\b", text, re.M)}


def log_dir_for(bundle: Bundle) -> Path:
    """Console logs go next to the bundle (dist/<release>-<board>/boot-tests/),
    or into the cache when that is not writable (a bundle from a tarball)."""
    here = bundle.root.parent / "boot-tests"
    try:
        here.mkdir(exist_ok=True)
        if os.access(here, os.W_OK):
            return here
    except OSError:
        pass
    fallback = paths.cache_dir() / "boot-tests" / f"{bundle.release}-{bundle.board}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def expected_page_size(bundle: Bundle) -> int | None:
    """The page size the bundle's own .config chose (arm64's ARM64_*K_PAGES), None if it says none."""
    config = next((rel for rel in bundle.files if rel.startswith("config-") and "/" not in rel), None)
    if config is None:
        return None
    text = bundle.member(config).read_text(errors="replace")
    for size, option in ((4096, "ARM64_4K_PAGES"), (16384, "ARM64_16K_PAGES"), (65536, "ARM64_64K_PAGES")):
        if f"CONFIG_{option}=y" in text.splitlines():
            return size
    return None


def boot_test(bundle: Bundle, store: Store, *, machine: str | None = None, timeout_s: float = 300,
              probe_s: int = 3, progress: Callable[[str, float, str], None] | None = None,
              modules: Sequence[Path] = ()) -> list[BootTest]:
    """Boot the bundle on each of its emulated machines (or only `machine`),
    loading `modules` (.ko files) in the guest."""
    m = bundle.manifest
    every = machines_of(m)
    if not every:
        raise UserError(f"board {bundle.board} has no QEMU machine to boot-test on: deploy with care, "
                        "or build for a board with one (rtforge kernel boards)")
    chosen = [q for q in every if machine in (None, q["machine"])]
    if not chosen:
        raise UserError(f"{bundle.board} is not boot-tested on '{machine}': choose one of "
                        f"{', '.join(q['machine'] for q in every)}")
    for ko in modules:
        if not Path(ko).is_file() or not str(ko).endswith(".ko"):
            raise UserError(f"--module {ko}: not a .ko file")
    if len({Path(ko).name for ko in modules}) != len(modules):
        raise UserError("two --module files have the same name: the guest loads them from one folder")
    tools.require(needs(bundle, chosen), "the boot test")
    kernel = bundle.member("boot/" + bundle.image)
    target = program_machine(m)
    logs = log_dir_for(bundle)
    results = []
    with tempfile.TemporaryDirectory(prefix="rtforge-boottest-") as d:
        initrd = initramfs.build({"init": build_program("bootinit", "rtforge-init", target, static=True),
                                  "rtprobe": build_probe(target, static=True),
                                  **{f"modules/{Path(ko).name}": Path(ko) for ko in modules}},
                                 Path(d) / "initramfs.cpio")
        entered = None  # the zImage behind the AArch32 entry, built once for every AArch64-only Pi machine
        for q in chosen:
            image = kernel
            if aarch32.needs_entry(m["arch"], q["machine"]):
                entered = entered or aarch32.wrap(kernel, Path(d) / f"{bundle.image}.aarch32-entry")
                image = entered
            results.append(_boot_one(bundle, store, q, image, initrd, logs, timeout_s, probe_s, progress,
                                     [Path(ko).name for ko in modules]))
    return results


def _run_qemu(argv: list[str], console: Path, timeout_s: float,
              progress: Callable[[float, str], None] | None) -> tuple[float, bool]:
    """Run QEMU until /init reports done, the kernel panics, QEMU exits or
    time runs out; returns (seconds, timed_out)."""
    start = time.monotonic()
    panicked_at = None
    with open(console, "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None and time.monotonic() - start < timeout_s:
                text = console.read_bytes()
                if b"RTFORGE-DONE" in text:
                    break
                if panicked_at is None and b"Kernel panic - not syncing" in text:
                    panicked_at = time.monotonic()
                if panicked_at is not None and time.monotonic() - panicked_at > PANIC_GRACE_S:
                    break
                if progress:
                    progress(time.monotonic() - start, _last_line(text))
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.kill()  # raspi machines only halt on power-off
            proc.wait()
    seconds = time.monotonic() - start
    return seconds, seconds >= timeout_s


def _boot_one(bundle: Bundle, store: Store, q: dict, kernel: Path, initrd: Path, logs: Path, timeout_s: float,
              probe_s: int, progress, modules: list[str]) -> BootTest:
    name = q["machine"]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    console = logs / f"{name}-{stamp}.log"
    argv = qemu_argv(bundle, q, kernel, initrd, probe_s)
    tick = (lambda s, line: progress(name, s, line)) if progress else None
    seconds, timed_out = _run_qemu(argv, console, timeout_s, tick)
    text = console.read_text(errors="replace")
    uname_v, uname_r, realtime = _field(text, "UNAME-V"), _field(text, "UNAME-R"), _field(text, "REALTIME")
    marker = bundle.marker
    common = {"machine": name, "seconds": seconds, "console_log": console, "stand_in": bool(q.get("stand_in")),
              "quirks": q["quirks"]}
    if uname_v is None:
        why = diagnose(text) or explain_stop(text)
        when = f"after {seconds:.0f} s" if not timed_out else f"within {timeout_s:.0f} s"
        reached = "" if why.kind == "panic" else f"did not reach /init {when}: "
        return BootTest(passed=False, sentence=f"{reached}{why.sentence()}", diagnosis=why, **common)
    page = _field(text, "PAGESIZE")
    page_size = int(page) if page and page.isdigit() else None
    loaded = module_results(text)
    listed = {line.split()[0] for line in _sections(text).get("proc-modules", "").splitlines() if line.split()}
    common.update(page_size=page_size, modules=loaded)
    problems = kernel_problems(marker, uname_v, None if realtime == "absent" else str(realtime),
                               release=bundle.release, uname_r=uname_r)
    want_page = expected_page_size(bundle)
    if want_page and page_size != want_page:
        problems.append(f"the page size is {page_size}, not the {want_page} its .config chose")
    for ko in modules:
        if loaded.get(ko) != "loaded":
            problems.append(f"{ko} did not load: {loaded.get(ko, 'init did not try it')}")
        elif ko.removesuffix(".ko").replace("-", "_") not in listed:
            problems.append(f"{ko} loaded, but /proc/modules does not list it")
    if "RTFORGE-DONE" not in text:
        why = diagnose(text) or explain_stop(text)
        problems.append(f"/init did not finish its {probe_s} s probe run: {why.sentence()}")
    run_id = _store_run(bundle, store, q, text) if "RTFORGE-DONE" in text else None
    if problems:
        return BootTest(passed=False, sentence="booted, but " + "; ".join(problems), uname_r=uname_r,
                        uname_v=uname_v, realtime=realtime, run_id=run_id, diagnosis=diagnose(text), **common)
    rt_file = "absent, as on mainline" if realtime == "absent" else "1"
    extra = f", {page_size // 1024}K pages" if page_size else ""
    extra += "".join(f", {m} loaded" for m in modules)
    return BootTest(passed=True, sentence=f"{uname_r} booted on QEMU {name} in {seconds:.0f} s: uname -v has {marker}, "
                    f"/sys/kernel/realtime {rt_file}{extra}", uname_r=uname_r, uname_v=uname_v, realtime=realtime,
                    run_id=run_id, **common)


def _last_line(text: bytes) -> str:
    lines = text[-400:].decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def _store_run(bundle: Bundle, store: Store, q: dict, console: str) -> str | None:
    """The probe's few seconds inside QEMU, stored as an emulated run.  It
    ended inside the guest before rtforge sees its files, so it enters the
    store through the run lifecycle's door for runs that ended elsewhere
    (measure/lifecycle.store_ended), never as "running"."""
    files = _sections(console)
    if "probe.json" not in files or not files["probe.json"].strip():
        return None
    machine = q["machine"]
    now = datetime.now(UTC)
    result = RunResult(run_id=store.new_run_id(f"qemu-{machine}", now), engine="probe",
                       state="running", host=f"QEMU {machine}", start_time=now.isoformat(timespec="seconds"),
                       label=f"boot test {bundle.release} on {machine} (emulated)",
                       config={"emulated": True, "interval_us": 1000, "priority": 90, "policy": "fifo", "loads": []},
                       reproducer=f"rtforge kernel boot-test {bundle.root} --machine {machine}")
    raw = {name: body.replace("\r\n", "\n") + ("\n" if not body.endswith("\n") else "")
           for name, body in files.items()
           if name in ("probe.json", "series.jsonl", "telemetry.jsonl")}      # the probe's files, never a path
    try:
        return store_ended(store, result, raw).run_id
    except UserError:
        return None
