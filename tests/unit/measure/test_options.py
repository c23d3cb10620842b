"""data/latency_options.toml read into Options: a field of the wrong
type is rtforge's own bug, refused when the file is read."""

from __future__ import annotations

import pytest

from rtforge.measure import options


def test_each_option_of_the_file_is_read_with_its_fields():
    assert options.OPTIONS["duration"].flag == "--duration"
    assert all(isinstance(o.choices, tuple) for o in options.OPTIONS.values())


@pytest.mark.parametrize("fields", [{"type": "int", "help": "h", "bounds": "yes"},
                                    {"type": "int", "help": "h", "colour": "red"},
                                    {"type": "int", "help": "h", "choices": "a,b"}])
def test_a_field_of_the_wrong_type_is_a_bug(fields):
    with pytest.raises(ValueError, match="latency_options.toml: x[.]"):
        options._option("x", fields)
