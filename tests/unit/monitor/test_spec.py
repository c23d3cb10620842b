"""The monitor's options checked before anything connects, and the one
command line that both `monitor run` and the service's unit run."""

from __future__ import annotations

import shlex

import pytest

from rtforge.cli import main
from rtforge.errors import UserError
from rtforge.monitor.service import unit_text
from rtforge.monitor.spec import PROGRAM, MonitorSpec

BASE = dict(window="5m", for_=None, interval_us="1000", priority="90", cpus=None, alert_us=None, textfile_dir=None,
            state_dir="/var/lib/rtforge-monitor", keep_days="14", max_mb="100")


def spec(**kw) -> MonitorSpec:
    return MonitorSpec.parse(**{**BASE, **kw})


def test_defaults_are_osadl_windows_at_low_cost():
    s = spec()
    assert (s.window_s, s.interval_us, s.duration_s) == (300, 1000, None)
    assert s.argv() == [PROGRAM, "--soak", "--state", "/var/lib/rtforge-monitor", "--window-s", "300",
                        "--interval-us", "1000", "--priority", "90", "--keep-days", "14", "--max-mb", "100"]


def test_every_option_reaches_the_probe():
    s = spec(window="1m", for_="2h", cpus="0-2", alert_us="150", textfile_dir="/var/lib/prom dir", keep_days="30")
    s.rtla = "/usr/bin/rtla"
    argv = s.argv("/x/rtprobe", echo=True)
    assert argv[argv.index("--window-s") + 1] == "60" and argv[argv.index("--duration-s") + 1] == "7200"
    assert ["--cpus", "0-2"] == argv[argv.index("--cpus"):argv.index("--cpus") + 2]
    assert argv[-9:] == ["--textfile-dir", "/var/lib/prom dir", "--alert-us", "150", "--rtla", "/usr/bin/rtla",
                         "--rtla-s", "30", "--echo"]


@pytest.mark.parametrize("kw, words", [
    ({"window": "300"}, "has no unit"), ({"window": "0s"}, "from 1s"), ({"window": "1.5s"}, "whole seconds"),
    ({"for_": "10"}, "has no unit"), ({"for_": "200d"}, "to 100d"), ({"interval_us": "５"}, "whole number"),
    ({"priority": "100"}, "1 to 99"), ({"alert_us": "-3"}, "whole number"), ({"cpus": "0;rm"}, "CPU list"),
    ({"state_dir": "relative/dir"}, "absolute path"), ({"textfile_dir": "/a\nb"}, "absolute path"),
    ({"window": "1s", "interval_us": "500000"}, "too few wake-ups"), ({"max_mb": "0"}, "from 1"),
])
def test_bad_options_are_one_sentence(kw, words):
    with pytest.raises(UserError) as e:
        spec(**kw)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_unit_runs_exactly_the_command_line():
    s = spec(alert_us="200", textfile_dir="/var/lib/prometheus/node-exporter", state_dir="/srv/mon%1 $x")
    text = unit_text(s)
    line = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    # systemd's quoting: % and $ doubled so they stay literal; then it splits like a shell
    words = shlex.split(line.removeprefix("ExecStart=").replace("%%", "%").replace("$$", "$"))
    assert words == s.argv()
    assert "Restart=on-failure" in text and "WantedBy=multi-user.target" in text and "LimitRTPRIO=infinity" in text


def test_the_cli_refuses_before_connecting(capsys):
    assert main(["monitor", "run", "--window", "5", "--state-dir", "/tmp/x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--window '5' has no unit" in err
    assert main(["monitor", "start", "no such host!", "--window", "5m"]) == 2
    assert "is not a host to connect to" in capsys.readouterr().err
    assert main(["trend", "x", "--min-span", "30"]) == 2
    assert "--min-span '30' has no unit" in capsys.readouterr().err
    assert main(["monitor", "status", "--ssh-config", "/etc/hostname"]) == 2
    assert "is for a board" in capsys.readouterr().err


def test_a_window_fits_80_columns_whatever_it_holds():
    from rtforge.cli.monitor import window_line
    from rtforge.results.soak.windows import parse_window

    from ...support.soakdata import window

    w = window(0, 1_800_000_000, [5000, 123_456_789], cpus=128, alert=True, partial=True)
    w["cpus"][127]["overruns"] = 99_999
    w["tel"]["temp_max_mc"] = [85_000]
    line = window_line(parse_window(w))
    assert len(line) <= 80 and "123,456.8 µs (CPU 0)" in line and "ALERT partial" in line, line
    calm = window_line(parse_window(window(1, 1_800_000_300, [5000, 42_000])))
    assert calm.endswith("max     42.0 µs (CPU 0)  51 °C"), calm
