"""Debian's node_exporter and Prometheus, for real, on loopback ports and in
temporary folders: node_exporter's textfile collector reads the monitor's
folder, Prometheus scrapes it every second, and the tests ask Prometheus's
HTTP API (/api/v1/query) what a dashboard would."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from .guest import die_with_parent
from .procs import free_port

PACKAGES = {"prometheus-node-exporter": "prometheus-node-exporter", "prometheus": "prometheus",
            "promtool": "prometheus"}


def require_tools() -> None:
    missing = sorted({pkg for tool, pkg in PACKAGES.items() if not shutil.which(tool)})
    if missing:  # not a skip: make setup installs them
        pytest.fail(f"these tests run Debian's {' and '.join(missing)}: apt-get install {' '.join(missing)}")


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _wait(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            _get(url, 2)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s: {log.read_text()[-2000:]}")


@dataclass
class Stack:
    exporter: subprocess.Popen
    prometheus: subprocess.Popen
    exporter_url: str
    api: str
    instance: str

    def query(self, expr: str) -> list[dict]:
        """An instant query's result (vector or scalar), or AssertionError with Prometheus's error."""
        doc = json.loads(_get(f"{self.api}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"))
        assert doc["status"] == "success", doc
        result = doc["data"]["result"]
        return result if doc["data"]["resultType"] == "vector" else [{"metric": {}, "value": result}]

    def wait_for(self, expr: str, ok, timeout: float = 60) -> list[dict]:
        t0 = time.monotonic()
        while True:
            got = self.query(expr)
            if ok(got):
                return got
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"{expr} never became what was waited for; last: {got}")
            time.sleep(0.5)

    def stop(self) -> None:
        for p in (self.prometheus, self.exporter):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def start(textfile_dir: Path, work: Path) -> Stack:
    require_tools()
    work.mkdir(parents=True, exist_ok=True)
    exp_port, prom_port = free_port(), free_port()
    exp_log, prom_log = work / "node_exporter.log", work / "prometheus.log"
    exporter = subprocess.Popen(
        ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{exp_port}", "--collector.disable-defaults",
         "--collector.textfile", f"--collector.textfile.directory={textfile_dir}"],
        stdout=subprocess.DEVNULL, stderr=open(exp_log, "wb"), preexec_fn=die_with_parent)
    try:
        _wait(f"http://127.0.0.1:{exp_port}/metrics", exporter, exp_log)
        (work / "prometheus.yml").write_text(f"""\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: rtforge
    static_configs:
      - targets: ["127.0.0.1:{exp_port}"]
""")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=open(prom_log, "wb"), preexec_fn=die_with_parent)
    except BaseException:
        exporter.terminate()
        raise
    stack = Stack(exporter, prometheus, f"http://127.0.0.1:{exp_port}/metrics", f"http://127.0.0.1:{prom_port}",
                  f"127.0.0.1:{exp_port}")
    try:
        _wait(f"{stack.api}/-/ready", prometheus, prom_log)
    except BaseException:
        stack.stop()
        raise
    return stack
