"""Simulations for what cannot exist on this machine, used by the doctor and
tune tests: a Raspberry Pi's /proc and /sys (the fixture trees under
tests/fixtures/sysroot, copied so a test may change them), the kernel's
clock and CPU-time accounting in such a tree, a Wi-Fi driver's power save
behind `iw`, and the Pi firmware behind `vcgencmd`.  None of them is judged
by the code under test: each only plays the part of the kernel or a tool.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysroot"


def copy_tree(name: str) -> Path:
    """A private, world-readable copy of a fixture tree (a login over the
    loopback sshd that is not root must be able to read it)."""
    base = Path(tempfile.mkdtemp(prefix=f"rtforge-sysroot-{name}-"))
    base.chmod(0o755)
    dest = base / name
    shutil.copytree(FIXTURES / name, dest, symlinks=True)
    for dirpath, _dirnames, filenames in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            p = Path(dirpath) / f
            if not p.is_symlink():
                p.chmod(0o644)
    return dest


def remove_tree(root: Path) -> None:
    shutil.rmtree(root.parent, ignore_errors=True)


def tree_digest(root: Path, exclude: tuple[str, ...] = ("var/lib/rtforge",)) -> dict[str, str]:
    """sha256 of every file below root (symlinks by their target)."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            p = Path(dirpath) / f
            rel = str(p.relative_to(root))
            if rel.startswith(exclude):
                continue
            data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


def write_file(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".sim-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class SimKernel:
    """The kernel's clock and CPU-time accounting in a fixture tree: every
    step it advances /proc/uptime by the time that passed and the system
    time of the given threads by their share of it, as the kernel would.
    busy: {tid: percent of one CPU}."""

    def __init__(self, root: Path, busy: dict[int, float], clk_tck: int = 100, step_s: float = 0.02):
        self.root, self.busy, self.clk_tck, self.step_s = root, busy, clk_tck, step_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        up = (root / "proc/uptime").read_text().split()
        self._uptime0, self._idle0 = float(up[0]), float(up[1])
        self._stat0 = {tid: self._stat_path(tid).read_text() for tid in busy}

    def _stat_path(self, tid: int) -> Path:
        return next(self.root.glob(f"proc/*/task/{tid}/stat"))

    def _tick(self, elapsed_s: float) -> None:
        # the threads first, the clock last: a reader never sees more CPU
        # time than the clock allows
        for tid, pct in self.busy.items():
            head, _, rest = self._stat0[tid].rpartition(")")
            f = rest.split()
            f[12] = str(int(f[12]) + int(pct / 100 * self.clk_tck * elapsed_s))   # stime, field 15
            text = f"{head}) {' '.join(f)}\n"
            for p in self.root.glob(f"proc/*/task/{tid}/stat"):
                _replace(p, text)
            own = self.root / f"proc/{tid}/stat"
            if own.exists():
                _replace(own, text)
        _replace(self.root / "proc/uptime", f"{self._uptime0 + elapsed_s:.2f} {self._idle0 + elapsed_s:.2f}\n")

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(self.step_s):
            self._tick(time.monotonic() - t0)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# A Wi-Fi driver's power save, as `iw` shows and sets it: one state file per
# interface in $RTFORGE_SIM_IW.
_IW = """#!/bin/sh
# Simulation (rtforge tests): iw for a Wi-Fi driver that does not exist here.
f="$RTFORGE_SIM_IW/$2"
if [ "$1" != dev ] || [ ! -f "$f" ]; then echo "command failed: No such device (-19)" >&2; exit 237; fi
case "$3 $4" in
  "get power_save") echo "Power save: $(cat "$f")" ;;
  "set power_save") case "$5" in on|off) echo "$5" > "$f" ;; *) echo "Invalid parameter" >&2; exit 1 ;; esac ;;
  *) echo "not simulated: $*" >&2; exit 1 ;;
esac
"""

# The Pi firmware's throttling flags, as `vcgencmd get_throttled` prints them.
_VCGENCMD = """#!/bin/sh
# Simulation (rtforge tests): vcgencmd answering from $RTFORGE_SIM_THROTTLED.
if [ "$1" = get_throttled ]; then echo "throttled=$RTFORGE_SIM_THROTTLED"; exit 0; fi
echo "error=1 error_msg=\\"Command not registered\\""; exit 1
"""


def sim_tools(where: Path, wifi: dict[str, str] | None = None, throttled: str | None = None) -> dict[str, str]:
    """Install the simulated tools in where/bin; returns the environment to set
    (PATH first, so they shadow nothing real: neither tool exists here)."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    if wifi is not None:
        state = where / "iw-state"
        state.mkdir(exist_ok=True)
        for iface, mode in wifi.items():
            (state / iface).write_text(mode + "\n")
        (bin_dir / "iw").write_text(_IW)
        (bin_dir / "iw").chmod(0o755)
        env["RTFORGE_SIM_IW"] = str(state)
    if throttled is not None:
        (bin_dir / "vcgencmd").write_text(_VCGENCMD)
        (bin_dir / "vcgencmd").chmod(0o755)
        env["RTFORGE_SIM_THROTTLED"] = throttled
    return env
