"""Boot a built kernel in QEMU before it goes near a board.

The kernel boots with an initramfs holding only rtforge's /init and the
statically cross-built probe.  /init prints uname and /sys/kernel/realtime,
runs the probe for a few seconds and prints its files between markers on
the serial console; the host reads them from QEMU's output.  The test passes
only if `uname -v` shows the bundle's RT marker (and /sys/kernel/realtime is
1 where the kernel has that file: RT-patched kernels do, mainline 6.12 does
not).  The probe's run is stored, labelled as emulated: inside TCG its
latencies are emulation noise, and every view of it says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..errors import UserError
from ..measure.probebuild import build_probe, build_program
from ..results.collect import finalize
from ..results.model import RunResult
from ..results.store import Store
from ..target.bundle import Bundle
from . import initramfs

QEMU = {"arm64": "qemu-system-aarch64", "arm": "qemu-system-arm", "x86_64": "qemu-system-x86_64"}
MACHINE = {"arm64": "aarch64", "arm": "armv7l", "x86_64": "x86_64"}
CONSOLE = {"arm64": "ttyAMA0", "arm": "ttyAMA0", "x86_64": "ttyS0"}


@dataclass
class BootTest:
    passed: bool
    sentence: str
    uname_r: str | None = None
    uname_v: str | None = None
    realtime: str | None = None
    run_id: str | None = None
    seconds: float = 0.0
    console_tail: list[str] = field(default_factory=list)


def qemu_argv(bundle: Bundle, kernel: Path, initrd: Path, probe_s: int) -> list[str]:
    m = bundle.manifest
    arch, q = m["arch"], m.get("qemu")
    if not q:
        raise UserError(f"board {bundle.board} has no QEMU machine to boot-test on: deploy with care, "
                        "or build for a board with one (rtforge kernel boards)")
    exe = QEMU[arch]
    if not shutil.which(exe):
        pkg = "qemu-system-arm" if arch in ("arm64", "arm") else "qemu-system-x86"
        raise UserError(f"{exe} is needed for the boot test: apt install {pkg}")
    append = " ".join(filter(None, [q.get("append") or f"console={CONSOLE[arch]}", "panic=-1", "oops=panic",
                                    f"rtforge.probe_s={probe_s}", "rdinit=/init"]))
    argv = [exe, "-M", q["machine"], "-nographic", "-no-reboot", "-monitor", "none", "-serial", "stdio",
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", append]
    if q.get("cpu"):
        argv += ["-cpu", q["cpu"]]
    if q["machine"] in ("virt", "q35"):
        argv += ["-m", "512", "-smp", "2"]  # raspi machines have fixed memory and CPUs
    if q.get("dtb"):
        dtb = bundle.root / "boot" / Path(q["dtb"]).name
        if not dtb.exists():
            raise UserError(f"the bundle has no {dtb.name}, which QEMU's {q['machine']} machine needs")
        argv += ["-dtb", str(dtb)]
    return argv


def _sections(text: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r"RTFORGE-BEGIN (\S+)\r?\n(.*?)\r?\nRTFORGE-END \1", text, re.S)}


def _field(text: str, name: str) -> str | None:
    m = re.search(rf"^RTFORGE-{name} (.*?)\r?$", text, re.M)
    return m[1] if m else None


def boot_test(bundle: Bundle, store: Store, *, timeout_s: float = 300, probe_s: int = 3,
              progress: Callable[[float, str], None] | None = None) -> BootTest:
    m = bundle.manifest
    arch = m["arch"]
    kernel = bundle.root / "boot" / bundle.image
    with tempfile.TemporaryDirectory(prefix="rtforge-boottest-") as d:
        initrd = initramfs.build({"init": build_program("bootinit", "rtforge-init", MACHINE[arch], static=True),
                                  "rtprobe": build_probe(MACHINE[arch], static=True)}, Path(d) / "initramfs.cpio")
        argv = qemu_argv(bundle, kernel, initrd, probe_s)
        console = Path(d) / "console.log"
        start = time.monotonic()
        with open(console, "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            try:
                while proc.poll() is None and time.monotonic() - start < timeout_s:
                    if b"RTFORGE-DONE" in console.read_bytes():
                        break
                    if progress:
                        progress(time.monotonic() - start, _last_line(console))
                    time.sleep(0.5)
            finally:
                if proc.poll() is None:
                    proc.kill()  # raspi machines only halt on power-off
                proc.wait()
        seconds = time.monotonic() - start
        text = console.read_text(errors="replace")
    tail = [line for line in text.splitlines() if line.strip()][-15:]
    uname_v, uname_r, realtime = _field(text, "UNAME-V"), _field(text, "UNAME-R"), _field(text, "REALTIME")
    marker = m["uname_v_marker"]
    if uname_v is None:
        return BootTest(False, f"the kernel did not reach /init within {timeout_s:.0f} s (last console lines below)",
                        seconds=seconds, console_tail=tail)
    problems = []
    if marker not in uname_v.split():
        problems.append(f"uname -v lacks {marker}: '{uname_v}'")
    if realtime not in ("absent", "1"):
        problems.append(f"/sys/kernel/realtime is {realtime}")
    if uname_r != bundle.release:
        problems.append(f"uname -r is {uname_r}, not {bundle.release}")
    run_id = _store_run(bundle, store, text) if "RTFORGE-DONE" in text else None
    if problems:
        return BootTest(False, "booted, but " + "; ".join(problems), uname_r, uname_v, realtime, run_id, seconds, tail)
    rt_file = "absent, as on mainline" if realtime == "absent" else "1"
    return BootTest(True, f"{uname_r} booted in QEMU {m['qemu']['machine']} in {seconds:.0f} s: uname -v has {marker}, "
                    f"/sys/kernel/realtime {rt_file}", uname_r, uname_v, realtime, run_id, seconds, tail)


def _last_line(console: Path) -> str:
    lines = console.read_bytes()[-400:].decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def _store_run(bundle: Bundle, store: Store, console: str) -> str | None:
    """The probe's few seconds inside QEMU, stored as an emulated run."""
    files = _sections(console)
    if "probe.json" not in files or not files["probe.json"].strip():
        return None
    now = datetime.now(timezone.utc)
    result = RunResult(run_id=store.new_run_id(f"qemu-{bundle.manifest['qemu']['machine']}", now), engine="probe",
                       state="running", host=f"QEMU {bundle.manifest['qemu']['machine']}",
                       start_time=now.isoformat(timespec="seconds"),
                       label=f"boot test {bundle.release} (emulated)",
                       config={"emulated": True, "interval_us": 1000, "priority": 90, "policy": "fifo", "loads": []},
                       reproducer=f"rtforge kernel boot-test {bundle.root}")
    raw = store.run_dir(result.run_id) / "raw"
    raw.mkdir(parents=True)
    for name, body in files.items():
        (raw / name).write_text(body.replace("\r\n", "\n") + ("\n" if not body.endswith("\n") else ""))
    try:
        finalize(result, raw.parent)
    except UserError:
        return None
    store.save(result)
    return result.run_id
