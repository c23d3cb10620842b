"""The soak monitor's windows read back: the probe's bucket arithmetic,
the histogram runs, damaged lines and links refused without losing the
rest, rollups that add up, and the store's folder adding each record once."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtforge.errors import UserError
from rtforge.results.soak.folder import MonitorFolder, find_host, host_name, wanted
from rtforge.results.soak.windows import (
    HIST_BUCKETS,
    Counts,
    CpuFigures,
    Reading,
    bucket_hi,
    bucket_index,
    bucket_lo,
    decode_runs,
    dedupe,
    encode_runs,
    merge_rollups,
    merged_histogram,
    parse_window,
    read_events,
    read_rollups,
    read_windows,
    roll,
)

from ...support.soakdata import S, window, write_windows


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_every_value_falls_in_its_bucket(v):
    i = bucket_index(v)
    assert 0 <= i < HIST_BUCKETS and bucket_lo(i) <= v <= bucket_hi(i)
    assert bucket_hi(i) - bucket_lo(i) <= max(0, bucket_lo(i) // 64)  # at most 1/64 of its value wide


def test_buckets_tile_uint64():
    assert bucket_lo(0) == 0 and bucket_hi(HIST_BUCKETS - 1) == 2**64 - 1
    assert all(bucket_hi(i) + 1 == bucket_lo(i + 1) for i in range(HIST_BUCKETS - 1))


@given(st.dictionaries(st.integers(0, HIST_BUCKETS - 1), st.integers(1, 10**12), max_size=60))
def test_runs_round_trip(buckets):
    runs = encode_runs(buckets)
    assert decode_runs(runs) == buckets
    assert all(run[1] and run[-1] for run in runs)  # a run starts and ends on a bucket that holds something


@given(st.lists(st.tuples(st.integers(0, HIST_BUCKETS - 8), st.lists(st.integers(0, 10**12), min_size=1,
                                                                       max_size=8)), max_size=40))
def test_counts_read_runs_as_decode_runs_does(pairs):
    """The store's arrays against the reference decoder, runs that overlap and zeros included."""
    runs = [[first, *counts] for first, counts in pairs]
    c = Counts.from_runs(runs)
    assert dict(c.items()) == decode_runs(runs) == dict(c)
    assert list(c) == sorted(decode_runs(runs)) and len(c) == len(decode_runs(runs))


@pytest.mark.parametrize("bad", [[[5]], [[HIST_BUCKETS, 1]], [[-1, 2]], "x", [[1, 1.5]], [[1, "2"]], [[1, 2**64]],
                                 [[True, 2]], [5]])
def test_counts_refuse_what_decode_runs_refuses(bad):
    with pytest.raises(ValueError):
        decode_runs(bad)
    with pytest.raises(ValueError):
        Counts.from_runs(bad)


def test_merged_histogram_of_counts_and_dicts_is_one_population():
    a, b = {3: 2, 200: 5}, {3: 1, 1000: 1}
    figs = [CpuFigures(0, 7, 3, 300, 0, 0, Counts.from_runs(encode_runs(a))), CpuFigures(1, 2, 3, 9000, 0, 0, b)]
    one = CpuFigures(0, 9, 3, 9000, 0, 0, {3: 3, 200: 5, 1000: 1})
    hist, lo, hi = merged_histogram([type("R", (), {"cpus": figs})()])
    ref, _, _ = merged_histogram([type("R", (), {"cpus": [one]})()])
    assert (hist.total, lo, hi) == (9, 3, 9000)
    assert list(hist.count) == list(ref.count) and list(hist.lo_ns) == list(ref.lo_ns)


@pytest.mark.parametrize("bad", [{"h": [[5]]}, {"h": [[HIST_BUCKETS, 1]]}, {"h": [[-1, 2]]}, {"h": "x"},
                                 {"h": [[1, True]]}, {"count": 3}, {"max_ns": -1}])
def test_a_damaged_cpu_entry_is_named(bad):
    w = window(0, 1_800_000_000, [5000, 6000])
    w["cpus"][0].update(bad)
    with pytest.raises(ValueError):
        parse_window(w)


def test_damaged_lines_and_links_are_skipped_and_said(tmp_path):
    folder = tmp_path / "mon"
    write_windows(folder, [window(0, 1_800_000_000, [5000]), window(1, 1_800_000_300, [7000])])
    day = next((folder / "windows").iterdir())
    with day.open("a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"v": 2}) + "\n")
        f.write(json.dumps(window(2, 1_800_000_600, [9000]))[:-5])  # cut off: no newline, not read
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps(window(9, 1_800_000_900, [1])) + "\n")
    os.symlink(secret, folder / "windows" / "2027-01-01.jsonl")
    reading = Reading()
    got = read_windows(folder, reading)
    assert [w.n for w in got] == [0, 1]
    assert len(reading.damaged) == 3
    assert any("2027-01-01.jsonl" in where for where, _ in reading.damaged)


def test_a_linked_windows_folder_is_not_followed(tmp_path):
    real = tmp_path / "elsewhere"
    write_windows(real, [window(0, 1_800_000_000, [5000])])
    (tmp_path / "mon").mkdir()
    os.symlink(real / "windows", tmp_path / "mon" / "windows")
    reading = Reading()
    assert read_windows(tmp_path / "mon", reading) == []
    assert reading.damaged and "symbolic link" in reading.damaged[0][1]


def test_windows_roll_into_hours_and_days_that_add_up():
    # 12 five-minute windows from 10:00 UTC, then 2 of the next hour, in two lives
    base = 1_800_000_000 - 1_800_000_000 % 3600
    ws = [parse_window(window(i, base + 300 * i, [1000 * (i + 1), 500], life="a-1" if i < 7 else "b-2"))
          for i in range(14)]
    hours = roll(ws, "hour")
    assert [h.key for h in hours] == [base, base + 3600]
    first = hours[0]
    assert first.windows == 12 and first.lives == ["a-1", "b-2"] and first.cpus[0].count == 24
    assert first.max_ns == 12000 and first.covered_ns == 12 * 300 * S
    (day,) = roll(ws, "day")
    assert day.windows == 14 and day.cpus[0].sum_ns == sum(1000 * (i + 1) + 500 for i in range(14))
    # per-life records of one hour merge into the same figures
    per_life = roll([w for w in ws if w.life == "a-1"], "hour") + roll([w for w in ws if w.life == "b-2"], "hour")
    merged = merge_rollups(per_life)
    assert [(m.key, m.windows, m.cpus[0].buckets) for m in merged] == \
           [(h.key, h.windows, h.cpus[0].buckets) for h in hours]


def test_merged_histogram_and_dedupe():
    w0 = parse_window(window(0, 1_800_000_000, [4000, 5000, 90_000], cpus=2))
    again = parse_window(window(0, 1_800_000_000, [1], cpus=2))  # the same window fetched twice
    w1 = parse_window(window(1, 1_800_000_300, [6000], cpus=2))
    assert [w.key for w in dedupe([w1, w0, again])] == [("aaaaaaaa-1", 0), ("aaaaaaaa-1", 1)]
    hist, lo, hi = merged_histogram([w0, w1])
    assert (hist.total, lo, hi) == (8, 4000, 90_000)


def test_pending_hours_count_once(tmp_path):
    folder = tmp_path / "mon"
    base = 1_800_000_000 - 1_800_000_000 % 3600
    rec = {"hour": base, "life": "a-1", "host": "pi", "kernel": "k", "kver": "v", "start_ns": base * S,
           "end_ns": (base + 300) * S, "windows": 1, "partial_windows": 0, "covered_ns": 300 * S, "alerts": 0,
           "spikes": 0, "temp_max_mc": None, "throttled": None, "cpus": [window(0, base, [5000])["cpus"][0]]}
    (folder / "hours").mkdir(parents=True)
    (folder / "hours" / "2027-01.jsonl").write_text(json.dumps(rec) + "\n")
    (folder / "pending.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "life": "b-2"}) + "\n")
    (hour,) = read_rollups(folder, "hour")
    assert hour.windows == 2 and hour.lives == ["a-1", "b-2"]


def test_what_pending_was_filing_counts_once(tmp_path):
    """pending.jsonl is also the journal of the lines its last window was
    appending (probe/soakjournal.c): those not filed yet count, once."""
    folder = tmp_path / "mon"
    base = 1_800_000_000 - 1_800_000_000 % 3600
    hour = {"hour": base - 3600, "life": "a-1", "host": "pi", "kernel": "k", "kver": "v",
            "start_ns": (base - 3600) * S, "end_ns": base * S, "windows": 1, "partial_windows": 0,
            "covered_ns": 300 * S, "alerts": 0, "spikes": 0, "temp_max_mc": None, "throttled": None,
            "cpus": [window(0, base - 300, [5000])["cpus"][0]]}
    now = {**hour, "hour": base, "start_ns": base * S, "end_ns": (base + 300) * S,
           "cpus": [window(1, base, [7000])["cpus"][0]]}
    w1 = {**window(1, base, [7000]), "life": "a-1"}
    (folder / "windows").mkdir(parents=True)
    (folder / "windows" / "2027-01-15.jsonl").write_text(json.dumps({**window(0, base - 300, [5000]),
                                                                      "life": "a-1"}) + "\n")
    journal = [{"file": "hours/2027-01.jsonl", "line": hour}, {"file": "windows/2027-01-15.jsonl", "line": w1},
               {"file": "../state", "line": hour}, now]
    (folder / "pending.jsonl").write_text("".join(json.dumps(d) + "\n" for d in journal))
    reading = Reading()
    assert [(h.key, h.windows) for h in read_rollups(folder, "hour", reading)] == [(base - 3600, 1), (base, 1)]
    assert [w.n for w in read_windows(folder, reading)] == [0, 1]
    assert len(reading.damaged) == 2 and all("not a file of the monitor's" in why for _, why in reading.damaged)
    # once filed, the journal's hour is not counted again
    (folder / "hours").mkdir()
    (folder / "hours" / "2027-01.jsonl").write_text(json.dumps(hour) + "\n")
    assert [(h.key, h.windows) for h in read_rollups(folder, "hour")] == [(base - 3600, 1), (base, 1)]


def test_the_store_folder_adds_each_record_once(tmp_path):
    folder = MonitorFolder(tmp_path / "results", "pi")
    lines = b"".join(json.dumps(window(i, 1_800_000_000 + 300 * i, [5000])).encode() + b"\n" for i in range(3))
    assert folder.add_lines("windows/2027-01-15.jsonl", lines)[:2] == (3, 0)
    # a fetch cut short and done again, plus a line that is no window and one still being written
    again = lines + b"garbage\n" + json.dumps(window(3, 1_800_000_900, [1])).encode()
    assert folder.add_lines("windows/2027-01-15.jsonl", again)[:2] == (0, 1)
    assert len(read_windows(folder.path)) == 3
    events = b'{"event":"start","t_ns":5,"life":"a"}\n{"event":"gap","t_ns":9,"life":"b"}\n'
    assert folder.add_lines("events.jsonl", events)[:2] == (2, 0)
    assert folder.add_lines("events.jsonl", events)[:2] == (0, 0)
    # the board rotated them into events.1.jsonl: still once
    assert folder.add_lines("events.1.jsonl", events + b'{"event":"stop","t_ns":11,"life":"b"}\n')[:2] == (1, 0)
    assert [e["event"] for e in read_events(folder.path)] == ["start", "gap", "stop"]


def test_names_from_a_board_are_checked():
    assert wanted("windows/2026-11-26.jsonl") == "append" and wanted("events.jsonl") == "append"
    assert wanted("evidence/2026-11-26T124708Z/spikes.csv") == "whole" and wanted("state") == "whole"
    for bad in ("windows/../../etc/passwd", "/etc/passwd", "evidence/x/spikes.csv", "windows/2026-11-26.jsonl.x",
                "lock", "evidence/2026-11-26T124708Z/../../state"):
        assert wanted(bad) is None
    assert host_name("pi/../x y") == "pi_.._x_y" and host_name("..") == "board"
    with pytest.raises(UserError):
        MonitorFolder("/tmp", "../x")


def test_a_board_is_found_by_its_name_or_the_destination_fetched_from(tmp_path):
    folder = MonitorFolder(tmp_path, "raspberrypi")
    folder.save_cursor({"files": {}, "destination": "pi@lab-pi-7"})
    assert find_host(tmp_path, "raspberrypi").host == "raspberrypi"
    assert find_host(tmp_path, "pi@raspberrypi").host == "raspberrypi"
    assert find_host(tmp_path, "pi@lab-pi-7").host == "raspberrypi"
    with pytest.raises(UserError, match="boards with data: raspberrypi"):
        find_host(tmp_path, "other")
