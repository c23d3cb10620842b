"""The fleet's own rules, worked out by hand: a board's rtforge_* variables
against the command line, a rolling deploy's batches, and what a play's
events make of each board (and of the exit status)."""

from __future__ import annotations

import pytest

from rtforge.errors import UserError
from rtforge.fleet import settings
from rtforge.fleet.campaign import Campaign, open_campaign
from rtforge.fleet.drive import parse_serial, plan_deploy
from rtforge.fleet.inventory import Inventory
from rtforge.fleet.status import NOT_REACHED, InventoryRefused, Tracker, exit_status
from rtforge.results.store.runstore import Store

from ...support.simpi import make_bundle


def spec_of(host, hostvars, given=None):
    return settings.check_latency(host, settings.latency_settings(host, hostvars, given or {}))


def test_the_command_line_wins_over_the_inventory_which_wins_over_the_defaults():
    s = spec_of("pi-01", {"rtforge_interval_us": 1000, "rtforge_cpus": (0, 1), "rtforge_duration": "10m"},
                {"duration": "30s"})
    assert s.duration_s == 30 and s.interval_us == 1000 and s.cpus == [0, 1]   # INI's 0,1 arrives as a tuple
    assert spec_of("pi-01", {}).duration_s == 60 and spec_of("pi-01", {}).interval_us == 200


@pytest.mark.parametrize("hostvars, given, says", [
    ({"rtforge_duration": "5x"}, {}, "pi-07: rtforge_duration"),
    ({"rtforge_interval_us": 5}, {}, "pi-07: rtforge_interval_us 5 is out of range"),
    ({"rtforge_interval_us": 1000}, {"interval_us": "7"}, "pi-07: --interval-us 7 is out of range"),
    ({"rtforge_load": "cpu,nope"}, {}, "pi-07: rtforge_load"),
    ({"rtforge_trace": "maybe"}, {}, "pi-07: rtforge_trace is 'maybe'"),
    ({"rtforge_duration": "1m", "rtforge_loops": 100}, {}, "both set"),
])
def test_a_bad_value_names_the_board_and_where_it_came_from(hostvars, given, says):
    with pytest.raises(UserError) as e:
        spec_of("pi-07", hostvars, given)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_board_has_its_own_cycle_time_unless_one_is_given_for_all():
    assert settings.cycle_ns("pi-01", {"rtforge_cycle_time": "250us"}, None) == 250_000
    assert settings.cycle_ns("pi-01", {"rtforge_cycle_time": "250us"}, "1ms") == 1_000_000
    assert settings.cycle_ns("pi-01", {}, None) is None
    with pytest.raises(UserError, match="pi-01: --cycle-time '1' has no unit"):
        settings.cycle_ns("pi-01", {"rtforge_cycle_time": 1}, None)


@pytest.mark.parametrize("text, batches", [("1,25%", [1, "25%"]), ("3", [3]), ("1, 2, 100%", [1, 2, "100%"])])
def test_serial_is_ansibles_batches(text, batches):
    assert parse_serial(text) == batches


@pytest.mark.parametrize("text", ["", "0", "1,,2", "101%", "two", "-1", "25 %x"])
def test_a_bad_serial_is_one_sentence(text):
    with pytest.raises(UserError, match="is not a list of batch sizes"):
        parse_serial(text)


def ev(kind, host, action="rtforge.rtforge.latency", **result):
    return {"event": kind, "host": host, "action": action, "result": result}


def test_events_make_each_boards_outcome_and_the_exit_status(tmp_path):
    c, resumed = open_campaign(tmp_path, "latency", "lab.ini", {}, ["a", "b", "c", "d"])
    assert not resumed
    t = Tracker(c, ["a", "b", "c", "d"])
    t.apply(ev("ok", "a", action="rtforge.rtforge.ssh_config"))          # not a board's result
    assert c.board("a").outcome is None
    for h in "abc":
        t.apply(ev("start", h))
    t.apply(ev("ok", "a", outcome="ok", run_id="r-a", summary={"max_ns": 5000}))
    t.apply(ev("retry", "b", outcome="unreachable", msg="cannot reach b"))
    t.apply(ev("failed", "b", outcome="unreachable", msg="cannot reach b"))
    t.finish()                                                            # c was measuring, d never started
    assert [c.board(h).outcome for h in "abcd"] == ["ok", "unreachable", "interrupted", NOT_REACHED]
    assert c.board("a").run_id == "r-a" and c.board("b").attempts == 1
    assert exit_status([c.board(h) for h in "abcd"]) == 1
    assert exit_status([c.board("a")]) == 0
    again = Campaign.read(c.dir)                                          # saved after every board
    assert again.board("a").summary == {"max_ns": 5000}
    # the same command again resumes this campaign while a board it names is not ok; a new one when all are
    resumed_one, resumed = open_campaign(tmp_path, "latency", "lab.ini", {}, ["a", "b"])
    assert resumed and resumed_one.id == c.id
    assert open_campaign(tmp_path, "latency", "lab.ini", {}, ["a"])[1] is False
    assert open_campaign(tmp_path, "latency", "lab.ini", {"duration": "1m"}, ["b"])[1] is False


def test_an_inventory_the_ssh_config_refused_stops_everything(tmp_path):
    c, _ = open_campaign(tmp_path, "latency", "lab.ini", {}, ["a"])
    with pytest.raises(InventoryRefused, match="password"):
        Tracker(c, ["a"]).apply(ev("failed", "a", action="rtforge.rtforge.ssh_config", msg="a logs in with a password"))


@pytest.mark.parametrize("where", ["command line", "inventory"])
def test_a_missing_bundle_is_one_sentence(tmp_path, where):
    missing = tmp_path / "no-such-bundle"
    hostvars = {"pi-01": {settings.BUNDLE: str(missing)}} if where == "inventory" else {}
    inv = Inventory("lab.ini", ["pi-01"], hostvars)
    with pytest.raises(UserError, match=f"^the bundle {missing} for pi-01 does not exist: build it"):
        plan_deploy(inv, Store(tmp_path / "r"), missing if where == "command line" else None, official=False,
                    no_try=False, timeout="10m", serial="1", forks=None, retries=None, new=False)
    assert not (tmp_path / "r").exists()    # refused before a campaign was recorded


def test_a_bundle_for_another_board_is_one_sentence(tmp_path):
    bundle, _ = make_bundle(tmp_path / "bundle")     # a pi4-64 bundle
    inv = Inventory("lab.ini", ["pi-01"], {"pi-01": {settings.BOARD: "pi5"}})
    with pytest.raises(UserError, match=f"^pi-01 is a pi5 .* but the bundle {bundle} was built for pi4-64"):
        plan_deploy(inv, Store(tmp_path / "r"), bundle, official=False, no_try=False, timeout="10m", serial="1",
                    forks=None, retries=None, new=False)
