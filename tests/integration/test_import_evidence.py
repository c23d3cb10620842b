"""What `show`, the report and `--json` say of imported runs, on real files of
the corpus (tests/corpus/cyclictest, their truths in SOURCES.tsv): no figure
claims more than the file holds (issue 35, "wrong or misleading figures")."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rtforge.cli import main

CORPUS = Path(__file__).parents[1] / "corpus" / "cyclictest"


def _import(tmp_path, name: str, capsys) -> list[str]:
    rd = ["--results-dir", str(tmp_path / "store")]
    assert main(["import", str(CORPUS / name), *rd]) == 0
    capsys.readouterr()
    return rd


def test_an_import_says_its_telemetry_was_not_recorded(tmp_path, capsys):
    """Nobody observed the board an imported file came from: 'no sensor' and
    'not reported by this board' were claims about it."""
    rd = _import(tmp_path, "chen116-h400-4t.txt", capsys)
    assert main(["show", "last", *rd]) == 0
    out = capsys.readouterr().out
    assert "temperature: not recorded · throttling: not recorded" in out, out
    assert "no sensor" not in out and "not reported" not in out
    assert main(["report", "last", "-o", str(tmp_path / "r.html"), *rd]) == 0
    html = (tmp_path / "r.html").read_text()
    telemetry = html[html.index('id="telemetry"'):]
    row = re.search(r"<tr><td>[^<]*</td>(.*?)</tr>", telemetry)[1]
    assert row.count("not recorded") == 4 and "no sensor" not in row, row
