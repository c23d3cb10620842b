"""Texts from files and users are shown, never obeyed: no terminal escape
sequence from a label or an imported host name reaches the terminal (show,
runs, compare, report), rich never reads them as markup, and a Markdown
report escapes '|' and newlines in its table cells."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.results.store.runstore import Store

GOLDEN = Path(__file__).parents[1] / "golden" / "cyclictest"
ESC = "\x1b"
HOSTILE = "evil\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x9b1m|col\nnew line[bold]bold[/bold]\u202eright\rCR"


@pytest.fixture
def rd(tmp_path, capsys):
    """One import whose label and host name (from its --json sysinfo) are hostile."""
    doc = json.loads((GOLDEN / "run.json").read_text())
    doc["sysinfo"]["nodename"] = HOSTILE
    src = tmp_path / "hostile.json"
    src.write_text(json.dumps(doc))
    rd = ["--results-dir", str(tmp_path / "results")]
    assert main(["import", str(GOLDEN / "hist.txt"), "--label", "other", *rd]) == 0   # to compare it with
    assert main(["import", str(src), "--label", HOSTILE, *rd]) == 2   # a label typed with escapes is refused
    assert "holds a control character" in capsys.readouterr().err
    assert main(["import", str(src), "--label", "plain", *rd]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "\x07" not in out and "\x9b" not in out
    # ... but a store copied from elsewhere may hold one: it is shown, never obeyed
    store = Store(tmp_path / "results")
    store.relabel(store.resolve("plain"), HOSTILE)
    return rd


def _no_control(text: str) -> None:
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text), repr(text)


@pytest.mark.parametrize("argv", [["show", "{hostile}"], ["runs"], ["compare", "other", "{hostile}"],
                                  ["report", "{hostile}", "-C", "1ms", "-o", "{tmp}/r.html"]])
def test_nothing_hostile_reaches_the_terminal(tmp_path, rd, capsys, argv):
    hostile = next(r.run_id for r in Store(tmp_path / "results").all_rows() if r.label == HOSTILE)
    assert main([a.replace("{tmp}", str(tmp_path)).replace("{hostile}", hostile) for a in argv] + rd) == 0
    out, err = capsys.readouterr()
    _no_control(out.replace("\n", ""))
    _no_control(err.replace("\n", ""))
    if argv[0] != "report":
        assert "\\x1b" in out  # shown, escaped, not dropped
    if argv[0] == "show":
        assert "[bold]bold[/bold]" in out  # rich did not take it as markup


def test_errors_naming_a_hostile_path_are_one_clean_line(tmp_path, capsys):
    path = tmp_path / f"no{ESC}[2Jsuch\nfile"
    assert main(["import", str(path), "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ESC not in err and "\\x1b[2J" in err


def test_markdown_cells_escape_pipes_and_newlines(tmp_path, rd, capsys):
    assert main(["report", "last", "-f", "md", "-o", str(tmp_path / "r.md"), *rd]) == 0
    md = (tmp_path / "r.md").read_text()
    _no_control(md.replace("\n", ""))
    columns, rows = None, 0
    for line in md.splitlines():  # every row of a table has as many cells as its separator line
        if line.startswith("|---"):
            columns = line.count("|")
        elif line.startswith("| ") and columns:
            assert len(re.split(r"(?<!\\)\|", line)) == columns + 1, line
            rows += 1
        elif not line.startswith("|"):
            columns = None
    assert rows >= 4
    assert "\\|col<br>new line" in md


def test_the_helpers_themselves():
    from rtforge.results.display import clean, md_cell, md_code

    assert clean("a\x1b[31mb\n\u202e\udcff") == "a\\x1b[31mb\\x0a\\u202e\\udcff"
    assert clean("µs · “label” 世界") == "µs · “label” 世界"
    assert md_cell("a|b\nc<script>") == "a\\|b<br>c&lt;script&gt;"
    assert md_code("rm `x`") == "`` rm `x` ``" and md_code("") == "–"
