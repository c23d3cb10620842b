"""The monitor as a systemd service on a real Debian board: the QEMU PC
guest (TCG, systemd, GRUB) of tests/support/guest.py, with Debian's
PREEMPT_RT kernel deployed by rtforge as its default (once per session:
tests/support/rtguest.py) and its stock kernel still installed.

A board's weeks in one test: it runs its stock kernel (GRUB's one-time
entry), `monitor start` installs and enables the service, the board reboots
(`systemctl reboot`) into its default, the RT kernel: systemd starts the
monitor again at boot, the folder records the gap (a reboot, after a clean
stop) and the kernel change, and `monitor fetch` brings every window of
both boots into the store.  The RT kernel has the timerlat tracer, so with
an alert threshold an alert window keeps rtla's analysis, which names the
thread that made the spike; `trend` shows both kernels.

Inside TCG latencies are emulation noise (milliseconds): what is checked is
what was recorded, not how fast anything was.  The figures (boot times,
gaps, windows) are printed; run with -s to see them.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from rtforge.cli import main
from rtforge.results.raw.rtla_analysis import parse as parse_timerlat
from rtforge.results.soak.windows import read_events, read_windows

from ..support.rtguest import HOG, HOG_CMD

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.guest]

STATE = "/var/lib/rtforge-monitor"
UNIT = "rtforge-monitor.service"


def board_windows(guest) -> list[dict]:
    out = guest.ssh(f"cat {STATE}/windows/*.jsonl 2>/dev/null", check=False).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def wait_until(what: str, ok, timeout: float = 300, step: float = 2.0):
    t0 = time.monotonic()
    while True:
        got = ok()
        if got:
            return got
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(step)


def figure(capsys, name: str, value) -> None:
    with capsys.disabled():  # a figure for the reader (-s), not the output under test
        print(f"[monitor guest] {name}: {value}")


def test_reboot_into_another_kernel_then_an_alert_keeps_rtlas_analysis(rt_guest, rt_guest_image, tmp_path, capsys):
    guest, image = rt_guest, rt_guest_image.base
    ssh, rd = ["--ssh-config", str(guest.ssh_config)], ["--results-dir", str(tmp_path / "results")]
    # the stock kernel, once (the guest's own grub-reboot); the default stays the RT kernel
    guest.ssh(f"grub-reboot '{guest.grub_entry(image.stock_release)}'")
    guest.reboot()
    assert guest.ssh("uname -r").stdout.strip() == image.stock_release

    # --dry-run: every check, the unit and each change printed, nothing changed on the board
    listing = "ls -d /etc/systemd/system/rtforge* /usr/local/libexec/rtforge /var/lib/rtforge* 2>/dev/null; true"
    before = guest.ssh(listing).stdout
    assert main(["monitor", "start", "guest", "--window", "5s", "--dry-run", *ssh]) == 0
    out = capsys.readouterr().out
    assert "would, on guest" in out and "run `systemctl enable rtforge-monitor.service`" in out
    assert "ExecStart=" in out and "CapabilityBoundingSet=CAP_SYS_NICE CAP_IPC_LOCK" in out
    assert guest.ssh(listing).stdout == before

    assert main(["monitor", "start", "guest", "--window", "5s", *ssh]) == 0
    assert f"{UNIT} runs on guest" in capsys.readouterr().out
    # the unit as systemd judges it on the board itself
    exposure = guest.ssh(f"systemd-analyze security {UNIT} --no-pager | tail -n 1").stdout
    figure(capsys, "systemd-analyze security", exposure.strip())
    assert float(re.search(r"exposure level for \S+: ([0-9.]+)", exposure)[1]) <= 5.0   # "1.4 OK :-)"
    assert guest.ssh(f"systemctl is-enabled {UNIT}").stdout.strip() == "enabled"
    first = wait_until("3 windows before the reboot", lambda: len(board_windows(guest)) >= 3 and board_windows(guest))
    life1 = first[0]["life"]
    assert {w["kernel"] for w in first} == {image.stock_release}

    reboot_s = guest.reboot()
    figure(capsys, "reboot to SSH (s)", round(reboot_s, 1))
    assert guest.ssh("uname -r").stdout.strip() == image.rt_release
    # systemd started the monitor again at boot: a new life, measuring on the other kernel
    assert wait_until(f"{UNIT} active after the reboot",
                      lambda: guest.ssh(f"systemctl is-active {UNIT}", check=False).stdout.strip() == "active")
    after = wait_until("2 windows after the reboot",
                       lambda: (ws := board_windows(guest)) and sum(w["life"] != life1 for w in ws) >= 2 and ws)
    life2 = next(w["life"] for w in after if w["life"] != life1)
    assert {w["kernel"] for w in after if w["life"] == life2} == {image.rt_release}

    assert main(["monitor", "status", "guest", *ssh, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["running"] is True and status["service"] == "active" and status["gaps"] == 1
    assert status["last_gap"]["reboot"] is True and status["last_gap"]["clean"] is True

    assert main(["monitor", "fetch", "guest", *ssh, *rd]) == 0
    capsys.readouterr()
    on_board = board_windows(guest)
    host = guest.ssh("uname -n").stdout.strip()
    folder = tmp_path / "results" / "monitor" / host
    stored = read_windows(folder)
    # every window the board recorded by the fetch is in the store (it goes on measuring meanwhile)
    assert {(w.life, w.n) for w in stored} >= {(w["life"], w["n"]) for w in after}
    assert {(w.life, w.n) for w in stored} <= {(w["life"], w["n"]) for w in on_board}
    events = read_events(folder)
    life_events = [e for e in events if e["event"] in ("start", "stop", "gap")]
    assert [(e["event"], e["life"]) for e in life_events][:4] == \
        [("start", life1), ("stop", life1), ("gap", life2), ("start", life2)]
    stop, gap = life_events[1], life_events[2]
    assert stop["reason"] == "SIGTERM"  # systemd stopped it on the way down
    ended = max(w.end_ns for w in stored if w.life == life1)
    assert gap["from_ns"] == ended and gap["reboot"] is True and gap["clean"] is True
    assert 0 < gap["seconds"] < reboot_s + 120
    assert [w for w in stored if w.life == life1][-1].partial  # the window the shutdown cut short is kept
    (kernel,) = [e for e in events if e["event"] == "kernel"]
    assert kernel["from"]["release"] == image.stock_release
    assert kernel["to"]["release"] == image.rt_release and "PREEMPT_RT" in kernel["to"]["version"]
    figure(capsys, "gap recorded (s)", gap["seconds"])
    figure(capsys, "windows before / after the reboot", (sum(w.life == life1 for w in stored),
                                                 sum(w.life == life2 for w in stored)))

    # the RT kernel traces: starting again with an alert threshold adds rtla's analysis.  The hog
    # runs first, so the alerts are its bursts (TCG's own noise stays far below 20 ms)
    guest.ssh(HOG_CMD)
    try:
        hog = guest.ssh(f"pgrep -x {HOG}").stdout.split()
        assert main(["monitor", "start", "guest", "--window", "5s", "--cpus", "0", "--alert-us", "20000", *ssh]) == 0
        assert "note:" not in capsys.readouterr().err  # rtla and timerlat are there
        assert " --rtla " in guest.ssh(f"systemctl cat {UNIT}").stdout.replace('"', " ")

        def analyses() -> dict[str, str]:
            """rtla's outputs whose run has ended (a timerlat event), fetched into the store."""
            assert main(["monitor", "fetch", "guest", *ssh, *rd]) == 0
            capsys.readouterr()
            return {e["evidence"]: (folder / e["evidence"] / "timerlat.out").read_text()
                    for e in read_events(folder) if e["event"] == "timerlat"}

        def names_the_hog(s) -> bool:
            """rtla names it as the thread that ran when the timer fired, or as the interference."""
            b = s.get("blocking") or {}
            threads = (s.get("interference") or {}).get("thread") or []
            return (b.get("comm"), b.get("pid")) == (HOG, int(hog[0])) or \
                any((t["name"], t["number"]) == (HOG, int(hog[0])) for t in threads)

        # rtla analyses the next spike over the threshold after an alert window; the hog makes one
        # every burst, so one of the (at most 12 a day) analyses names it
        try:
            outputs = wait_until("an rtla analysis naming the hog",
                                 lambda: (o := analyses()) and any(names_the_hog(x) for t in o.values()
                                                                   for x in parse_timerlat(t)) and o,
                                 timeout=600, step=15)
        except AssertionError:
            with capsys.disabled():  # what rtla wrote, whole, for whoever reads the log
                for name, text in analyses().items():
                    print(f"[monitor guest] {name}/timerlat.out:\n{text}")
            raise
    finally:
        guest.ssh(f"pkill -x {HOG}", check=False)
    spikes = [s for text in outputs.values() for s in parse_timerlat(text)]
    # rtla stopped over the threshold (a spike beyond its range it prints negative: tests/integration/test_trace.py)
    assert all(s["cpu"] == 0 and (s["total_us"] >= 20_000 or s["total_us"] < 0) for s in spikes), spikes
    figure(capsys, "rtla outputs kept / analyses read / naming the hog",
           (len(outputs), len(spikes), sum(map(names_the_hog, spikes))))
    unread = [name for name, text in outputs.items() if "hit stop tracing" in text and not parse_timerlat(text)]
    if unread:  # said, not failed: rtla's text is results/raw/rtla_analysis.py's to read
        with capsys.disabled():
            for name in unread:
                print(f"[monitor guest] an analysis results/raw/rtla_analysis.py does not read, {name}:\n"
                      f"{outputs[name]}")
    again = read_windows(folder)  # fetched again and again: each window once
    assert len(again) >= len(stored) and len({w.key for w in again}) == len(again)
    alerts = [w for w in again if w.alert]
    assert alerts and any((folder / w.alert["evidence"] / "spikes.csv").exists() for w in alerts)

    # TCG's noise and the hog decide the verdict here; its exit status says it (1: a regression)
    code = main(["trend", host, *rd])
    out = capsys.readouterr().out
    assert image.stock_release in out and image.rt_release in out and "1 kernel change" in out
    assert code == (1 if "regression against kernel" in out else 0), out

    assert main(["monitor", "stop", "guest", "--uninstall", *ssh]) == 0
    assert guest.ssh(f"systemctl is-active {UNIT}", check=False).stdout.strip() in ("inactive", "unknown")
    assert guest.ssh(f"test -e /etc/systemd/system/{UNIT}", check=False).returncode == 1
    assert guest.ssh(f"test -s {STATE}/state").returncode == 0  # the windows stay
