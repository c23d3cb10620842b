"""What the monitor measures, checked before anything connects, as the
probe's command line -- the one line that `monitor run` runs in the
foreground and rtforge-monitor.service runs on a board."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..units import format_span, parse_span_s, shown

# Where the monitor lives on a board (and on this machine, as root): the
# program where packages' helpers go, its state where services keep theirs.
PROGRAM = "/usr/local/libexec/rtforge/rtprobe"
STATE_DIR = "/var/lib/rtforge-monitor"
# Debian's prometheus-node-exporter reads *.prom here (its default
# --collector.textfile.directory).
DEBIAN_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
DEFAULT_WINDOW_S = 300          # OSADL's 5-minute intervals
DEFAULT_INTERVAL_US = 1000      # 1 kHz: a wake-up per ms per CPU keeps the monitor cheap for months
DEFAULT_PRIORITY = 90
DEFAULT_KEEP_DAYS = 14
DEFAULT_MAX_MB = 100
DEFAULT_RTLA_S = 30


def local_state_dir() -> Path:
    """This machine's monitor folder when none is given: the service's as
    root, else the user's state folder (XDG_STATE_HOME)."""
    if os.geteuid() == 0:
        return Path(STATE_DIR)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rtforge" / "monitor"


def _whole(option: str, text: str, lo: int, hi: int) -> int:
    t = text.strip()
    if not t.isascii() or not t.isdigit() or not lo <= int(t) <= hi:
        raise UserError(f"{option} '{shown(text)}' is not a whole number from {lo} to {hi}")
    return int(t)


@dataclass
class MonitorSpec:
    window_s: int = DEFAULT_WINDOW_S
    duration_s: int | None = None       # --for: None = until stopped
    interval_us: int = DEFAULT_INTERVAL_US
    priority: int = DEFAULT_PRIORITY
    cpus: str | None = None              # the probe's --cpus (checked by the probe against the target's)
    alert_us: int | None = None
    textfile_dir: str | None = None
    state_dir: str = STATE_DIR
    keep_days: int = DEFAULT_KEEP_DAYS
    max_mb: int = DEFAULT_MAX_MB
    rtla: str | None = None              # rtla's path on the target, when it can analyse (checked by the host)
    rtla_s: int = DEFAULT_RTLA_S

    @classmethod
    def parse(cls, *, window: str, for_: str | None, interval_us: str, priority: str, cpus: str | None,
              alert_us: str | None, textfile_dir: str | None, state_dir: str, keep_days: str,
              max_mb: str) -> MonitorSpec:
        window_s = parse_span_s(window, "--window", "5m, 60s, 1h")
        if window_s != int(window_s) or not 1 <= window_s <= 86400:
            raise UserError(f"--window '{shown(window)}' must be whole seconds from 1s to 1d")
        duration = None
        if for_ is not None:
            duration = parse_span_s(for_, "--for", "30s, 10m, 2h, 7d")
            if duration != int(duration) or not 1 <= duration <= 100 * 86400:
                raise UserError(f"--for '{shown(for_)}' must be whole seconds from 1s to 100d")
        spec = cls(window_s=int(window_s), duration_s=int(duration) if duration else None,
                   interval_us=_whole("--interval-us", interval_us, 10, 10_000_000),
                   priority=_whole("--priority", priority, 1, 99),
                   cpus=cpus.strip() if cpus else None,
                   alert_us=_whole("--alert-us", alert_us, 1, 10_000_000) if alert_us is not None else None,
                   textfile_dir=textfile_dir, state_dir=state_dir,
                   keep_days=_whole("--keep-days", keep_days, 1, 3650), max_mb=_whole("--max-mb", max_mb, 1, 1_000_000))
        if spec.cpus is not None and (not spec.cpus or spec.cpus.strip("0123456789,-")):
            raise UserError(f"--cpus '{shown(cpus or '')}' is not a CPU list like 0-3,6")
        if spec.window_s * 1_000_000 < 4 * spec.interval_us:
            raise UserError(f"--window {format_span(spec.window_s)} holds too few wake-ups of "
                            f"--interval-us {spec.interval_us}: make it longer")
        for option, path in (("--state-dir", state_dir), ("--textfile-dir", textfile_dir)):
            if path is not None and (not path.startswith("/") or "\n" in path or len(path) > 1024):
                raise UserError(f"{option} '{shown(path)}' must be an absolute path")
        return spec

    def argv(self, program: str = PROGRAM, *, echo: bool = False) -> list[str]:
        """The probe's command line (what the service's ExecStart= runs)."""
        argv = [program, "--soak", "--state", self.state_dir, "--window-s", str(self.window_s),
                "--interval-us", str(self.interval_us), "--priority", str(self.priority),
                "--keep-days", str(self.keep_days), "--max-mb", str(self.max_mb)]
        if self.cpus:
            argv += ["--cpus", self.cpus]
        if self.duration_s:
            argv += ["--duration-s", str(self.duration_s)]
        if self.textfile_dir:
            argv += ["--textfile-dir", self.textfile_dir]
        if self.alert_us:
            argv += ["--alert-us", str(self.alert_us)]
            if self.rtla:
                argv += ["--rtla", self.rtla, "--rtla-s", str(self.rtla_s)]
        if echo:
            argv.append("--echo")
        return argv
