"""Numbers, counts and lengths written one way wherever rtforge writes
them (units.format_us, plural, article, format_seconds), and what it
prints typed back in."""

from __future__ import annotations

import pytest

from rtforge.cli.render import us
from rtforge.report.verdict import verdict
from rtforge.results.checks import run_warnings
from rtforge.units import article, format_seconds, format_us, parse_span_s, plural

from ..support.runs import run, us_cpu


@pytest.mark.parametrize("n, noun, text", [(0, "note", "0 notes"), (1, "board", "1 board"), (2, "board", "2 boards"),
                                           (1234, "window", "1,234 windows"), (1, "overrun", "1 overrun")])
def test_a_count_and_its_noun_agree(n, noun, text):
    assert plural(n, noun) == text


@pytest.mark.parametrize("cycle, a", [("84 µs", "an"), ("1 ms", "a"), ("800 µs", "an"), ("11 ms", "an"),
                                      ("18 ms", "an"), ("100 µs", "a"), ("250 µs", "a"), ("8 ms", "an"),
                                      ("1.5 ms", "a"), ("110 µs", "a")])
def test_a_cycle_time_takes_the_article_it_is_read_with(cycle, a):
    assert article(cycle) == a


def test_the_verdict_says_an_84_us_cycle():
    v = verdict(run([us_cpu(0, {20: 1000, 30: 1})]), 84_000)
    assert "for an 84 µs cycle" in v.sentence, v.sentence


def test_tables_and_sentences_write_a_latency_alike():
    """'6864.1' in the tables, '6,864.1 µs' in the verdict."""
    r = run([us_cpu(0, {20: 1000, 6864: 1})])
    assert us(6_864_100) == format_us(6_864_100) == "6,864.1"
    assert "6,864.0 µs" in verdict(r, 1_000_000).sentence


@pytest.mark.parametrize("seconds", [0.4, 2, 10, 600, 7200, 90061])
def test_a_length_rtforge_prints_is_a_length_it_takes(seconds):
    """'10 s' in tables and prose alike, and `--duration "10 s"` is no longer refused."""
    text = format_seconds(seconds)
    assert text.endswith(" s")
    if seconds >= 1:
        assert parse_span_s(text) == round(seconds)


def test_one_overrun_is_one_period():
    r = run([us_cpu(0, {20: 1000}, overruns=1)])
    assert any(w.startswith("1 whole period was missed") for w in run_warnings(r)), run_warnings(r)
