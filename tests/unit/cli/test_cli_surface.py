"""The command line a person expects: --version, help with the journey in
order, one "did you mean", bare `rtforge` is help (exit 0), numbers shown
as numbers, HOST explained, an unknown board answered with the boards it
may mean; imports say what the user knows, and unknown stays '?'."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rtforge import __version__
from rtforge.cli import JOURNEY, main

from ...support.runs import left_in

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "cyclictest"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"rtforge {__version__}"


def test_bare_rtforge_is_help_and_success(capsys):
    code, out, err = run(capsys)
    assert code == 0 and "Usage: rtforge" in out and err == ""
    code, out, err = run(capsys, "kernel")
    assert code == 0 and "boot-test" in out and err == ""


def test_help_lists_the_journey_in_order(capsys):
    _, out, _ = run(capsys, "--help")
    panels = re.findall(r"╭─ (\w+) ─", out)
    assert panels == ["Options", *JOURNEY]
    listed = re.findall(r"^│ ([a-z][a-z-]*) {2,}", out, re.M)
    assert listed == [name for names in JOURNEY.values() for name in names]
    assert "--install-completion" in out and "HOST is a board reached over SSH" in out


def test_one_did_you_mean(capsys):
    code, _, err = run(capsys, "latnecy")
    assert code == 2 and err.count("Did you mean") == 1 and "'latency'" in err


def test_numbers_are_typed_as_numbers_and_host_is_explained(capsys):
    _, out, _ = run(capsys, "latency", "--help")
    for option in ("--interval-us", "--priority", "--loops", "--histogram-us"):
        assert re.search(rf"{option}\s+(-\w\s+)?INTEGER", out), option
    assert re.search(r"--spike-us\s+NUMBER", out)   # 12.5 µs is taken (the probe counts ns)
    assert re.search(r"--duration\s+-D\s+DURATION", out)
    assert "USER@HOST, HOST or a Host alias" in out


@pytest.mark.parametrize("typed, first, also", [("pi4", "pi4-64", "pi4-32"), ("pi3", "pi4-64", "pi2"),
                                                 ("rpi5", "pi5", None)])
def test_an_unknown_board_is_answered_with_what_it_may_mean(capsys, typed, first, also):
    code, _, err = run(capsys, "kernel", "build", "--board", typed)
    assert code == 2 and "did you mean" in err and len(err.strip().splitlines()) == 1
    said = re.findall(r"(?:mean|or) ([\w-]+) \(", err)
    assert said[0] == first and (also is None or also in said)


def test_import_says_what_the_user_knows_and_unknown_stays_unknown(tmp_path, capsys):
    rd = ["--results-dir", str(tmp_path / "r")]
    code, out, err = run(capsys, "import", str(GOLDEN / "hist.txt"), "--json", *rd)
    shown = json.loads(out)
    code, text, _ = run(capsys, "show", shown["run_id"], *rd)
    assert "load ?" in text and "kernel ?" in text and "None" not in text and "load none" not in text
    code, out, _ = run(capsys, "import", str(GOLDEN / "histofall.txt"), "--kernel", "6.12.0-rt5-v8+", "--preempt", "rt",
                       "--load", "cpu,io", "--priority", "80", "--label", "told", "--json", *rd)
    assert code == 0
    code, text, _ = run(capsys, "show", "told", *rd)
    assert "kernel 6.12.0-rt5-v8+" in text and "preemption rt" in text and "load cpu,io" in text
    code, out, _ = run(capsys, "runs", "--json", *rd)
    rows = {r["label"]: r for r in json.loads(out)}
    assert rows[None]["loads"] is None and rows["told"]["loads"] == "cpu,io"


@pytest.mark.parametrize("argv, says", [
    (["--preempt", "fast"], "--preempt 'fast' is not a preemption model"),
    (["--priority", "120"], "--priority 120 is out of range"),
    (["--load", "cpu;rm -rf"], "is not a list of load names"),
    (["--kernel", "6.1 rt"], "is not a kernel release"),
    (["--priority", "50"], "says priority 90, but --priority says 50"),   # the file's status lines say P:90
])
def test_import_options_are_checked(tmp_path, capsys, argv, says):
    code, _, err = run(capsys, "import", str(GOLDEN / "summary.txt"), *argv, "--results-dir", str(tmp_path / "r"))
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert left_in(tmp_path / "r" / "runs") == []


@pytest.mark.parametrize("label", ["last", "2026", "20260101-120000", "20260101-120000-pi-1a2b"])
def test_a_label_that_could_never_name_its_run_is_refused(capsys, tmp_path, label):
    """'last' always means the run stored last, and an id or its start is read as an id
    (Store.resolve): such a label was accepted and then never found its run."""
    code, _, err = run(capsys, "import", str(GOLDEN / "hist.txt"), "--label", label,
                       "--results-dir", str(tmp_path / "results"))
    assert code == 2 and "could never name its run" in err, err
    assert left_in(tmp_path / "results" / "runs") == []


@pytest.mark.parametrize("label", ["2026 stock", "6.12-rt", "1", "Pi 4 last run"])
def test_a_label_with_a_word_or_no_date_is_taken(capsys, tmp_path, label):
    from rtforge.cli.common import check_label

    assert check_label(label) == label
