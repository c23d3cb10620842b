"""The collection's files made from the one declaration of the latency
options (data/latency_options.toml) are what it makes now: an option added,
renamed or re-typed there and not made again (`make collection`) fails
here, before Ansible ever sees a module that disagrees with rtforge."""

from __future__ import annotations

from rtforge.fleet import collection
from rtforge.measure.options import OPTIONS


def test_the_collections_made_files_are_the_declarations():
    stale = [str(p.relative_to(collection.ROOT)) for p in collection.differing()]
    assert stale == [], f"{stale} differ from data/latency_options.toml: run `make collection`"


def test_the_check_can_fail(tmp_path, monkeypatch):
    """A changed declaration makes other files: the comparison sees it, and `--check` says so with exit 1."""
    made = collection.made()
    o = OPTIONS["interval_us"]
    monkeypatch.setitem(OPTIONS, "interval_us", type(o)(**{**o.__dict__, "type": "float"}))
    changed = collection.made()
    assert [p for p in made if made[p] != changed[p]] == list(made)   # the fragment and module_utils both
    assert collection.main(["--check"]) == 1
