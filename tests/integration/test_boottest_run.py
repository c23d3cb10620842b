"""The boot test's probe run enters the store through the run lifecycle
(measure/lifecycle.store_ended): the real probe's files, as the guest's /init
prints them on a serial console (CRLF, between markers), stored as an
emulated run -- and a console whose files are not a run leaves nothing in the
store.  No QEMU: the console is the probe's own output wrapped as /init
wraps it (bootinit/init.c)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rtforge.kernel.boottest import _store_run

from ..conftest import run_probe

pytestmark = pytest.mark.root


def console(files: dict[str, str]) -> str:
    """What /init prints: each file between RTFORGE-BEGIN/END, line ends as a serial console sends them."""
    text = "Booting Linux on physical CPU 0x0\nRTFORGE-UNAME-R 6.12.0-rt\n"
    for name, body in files.items():
        text += f"RTFORGE-BEGIN {name}\n{body.rstrip()}\nRTFORGE-END {name}\n"
    return text.replace("\n", "\r\n") + "RTFORGE-DONE\r\n"


BUNDLE = SimpleNamespace(release="6.12.0-rt", root=Path("/dist/6.12.0-rt-pi4-64"))


def test_the_guests_probe_run_is_stored_as_an_emulated_run(probe, tmp_path, store):
    out = tmp_path / "run"
    r = run_probe(probe, "--out", out, "--duration-s", "1", "--interval-us", "1000", "--checkpoint-s", "1")
    assert r.returncode == 0, r.stderr
    files = {n: (out / n).read_text() for n in ("probe.json", "series.jsonl") if (out / n).exists()}
    run_id = _store_run(BUNDLE, store, {"machine": "raspi4b"}, console(files))
    assert run_id is not None and store.all_rows()[0].run_id == run_id
    result = store.load(run_id)
    assert (result.state, result.host, result.config["emulated"]) == ("complete", "QEMU raspi4b", True)
    assert result.label == "boot test 6.12.0-rt on raspi4b (emulated)" and result.cpus and result.owner is None
    raw = store.run_dir(run_id) / "raw"
    assert "\r" not in (raw / "probe.json").read_text()            # the console's line ends are not the run's
    assert sorted(p.name for p in raw.iterdir()) == sorted(files)


def test_a_console_whose_files_are_not_a_run_leaves_nothing(store):
    """It was saved into its run folder before it was read: a probe.json that
    could not be read left a folder with raw/ and no result.json."""
    assert _store_run(BUNDLE, store, {"machine": "raspi4b"}, console({"probe.json": '{"probe_format": 99}'})) is None
    assert store.all_rows() == [] and not [p for p in store.runs_dir.iterdir() if p.name != ".tmp"]
    assert not list((store.runs_dir / ".tmp").iterdir())
    assert _store_run(BUNDLE, store, {"machine": "raspi4b"}, "no markers at all\r\n") is None
