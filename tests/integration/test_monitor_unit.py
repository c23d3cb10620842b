"""rtforge-monitor.service as systemd judges it: `systemd-analyze security`
(offline, on the unit file rtforge writes) holds the root daemon a shared
board runs to an exposure of 5.0 or less, for every kind of monitor."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from rtforge.monitor.service import unit_text
from rtforge.monitor.spec import MonitorSpec

SPECS = {
    "plain": MonitorSpec(),
    "textfile and rtla": MonitorSpec(alert_us=150, rtla="/usr/bin/rtla",
                                     textfile_dir="/var/lib/prometheus/node-exporter"),
    "a folder with a space": MonitorSpec(state_dir="/srv/rt monitor"),
}


@pytest.mark.parametrize("kind", SPECS)
def test_the_unit_is_hardened(kind, tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (apt install systemd)")
    unit = tmp_path / "rtforge-monitor.service"
    text = unit_text(SPECS[kind])
    unit.write_text(text)
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m[1]) <= 5.0, r.stdout
    # what a real-time monitor needs, and nothing pulled in
    assert "CapabilityBoundingSet=CAP_SYS_NICE CAP_IPC_LOCK\n" in text and "Wants=" not in text
    assert "After=local-fs.target time-sync.target" in text
    writable = re.search(r"^ReadWritePaths=(.*)$", text, re.M)[1]
    spec = SPECS[kind]
    assert f'"{spec.state_dir}"' in writable
    assert (f'"{spec.textfile_dir}"' in writable) == bool(spec.textfile_dir)
    # rtla sets up its tracer below /sys (tracefs): with it, /sys stays writable
    assert ("ProtectKernelTunables=yes" in text) != bool(spec.rtla)
