"""`rtforge import` of rtla timerlat output made for real: the QEMU PC guest
runs Debian's PREEMPT_RT kernel (deployed by rtforge once per session,
tests/support/rtguest.py) and rtla from bookworm-backports.  Fresh outputs
of `rtla timerlat hist` (with and without the IRQ columns) and `top` are
made there, copied here and imported; each CPU's maximum must be the one
the file's own `max:` line (hist) or thread `max` column (top) states --
read here with small regexes, never with rtforge's parser.

Under TCG the latencies are emulation noise (milliseconds): what is checked
is that the numbers rtla printed are the numbers rtforge stored."""

from __future__ import annotations

import re

import pytest

from rtforge.cli import main
from rtforge.results.store.runstore import Store

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.guest]

COMMANDS = {
    "hist.txt": "rtla timerlat hist -d 8s",
    "hist-noirq.txt": "rtla timerlat hist -d 8s --no-irq",
    "top.txt": "rtla timerlat top -q -d 8s",
}


def hist_truth(text: str) -> dict[int, int]:
    """CPU -> its Thr column's max: line, in µs."""
    names = re.search(r"^Index(.*)$", text, re.M)[1].split()
    maxes = re.search(r"^max:(.*)$", text, re.M)[1].split()
    return {int(n[4:]): int(v) for n, v in zip(names, maxes) if n.startswith("Thr-")}


def top_truth(text: str) -> dict[int, int]:
    """CPU -> the max of its thread latency columns, in µs."""
    out = {}
    for m in re.finditer(r"^\s*(\d+) #\d+\s*\|(?:\s*\S+){4}\s*\|\s*\S+\s+\S+\s+\S+\s+(\d+)", text, re.M):
        out[int(m[1])] = int(m[2])
    return out


def test_rtla_outputs_made_in_the_guest_import_with_the_maxima_they_state(rt_guest, tmp_path, capsys):
    guest = rt_guest
    assert "PREEMPT_RT" in guest.ssh("uname -v").stdout.split()
    rd = ["--results-dir", str(tmp_path / "store")]
    for name, command in COMMANDS.items():
        out = guest.ssh(command, timeout=300)
        path = tmp_path / name
        path.write_text(out.stdout)
        truth = (top_truth if name.startswith("top") else hist_truth)(out.stdout)
        assert truth, f"{command} printed no CPU line:\n{out.stdout}{out.stderr}"
        assert main(["import", str(path), "--json", *rd]) == 0, capsys.readouterr().err
        capsys.readouterr()
        store = Store(tmp_path / "store")
        r = store.load(store.resolve("last"))
        assert r.source["format"] == ("rtla-timerlat-top" if name.startswith("top") else "rtla-timerlat-hist")
        assert {c.cpu: c.max_ns // 1000 for c in r.cpus} == truth, (name, out.stdout)
        if "noirq" not in name:
            assert r.source["other_latencies"]["irq"], r.source
        assert main(["show", "last", *rd]) == 0
        assert "Traceback" not in capsys.readouterr().err
