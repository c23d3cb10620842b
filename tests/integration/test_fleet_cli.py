"""rtforge fleet as a person meets it: bad input is one sentence and exit
status 2 before any board is touched (a missing inventory, a bad rtforge_*
variable, a password login, no ansible-playbook); a rolling deploy goes on
past a board it cannot reach and stops at the first board that says no;
the summary fits an 80-column terminal.  Real ansible-playbook throughout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from rtforge.cli import main

from ..support.procs import free_port, run_on_pty

RTFORGE = [sys.executable, "-m", "rtforge"]


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def nowhere(n: int) -> str:
    """Hosts on loopback ports nothing listens on: unreachable at once."""
    return "".join(f"pi-{i:02d} ansible_host=127.0.0.1 ansible_port={free_port()}\n" for i in range(1, n + 1))


def test_a_missing_inventory_is_one_sentence(tmp_path, capsys):
    code, out, err = cli(capsys, "fleet", "latency", str(tmp_path / "lab.ini"), "--results-dir", str(tmp_path / "r"))
    assert code == 2 and out == ""
    assert err.strip() == f"rtforge: error: the inventory {tmp_path / 'lab.ini'} does not exist: give the file " \
                          "(INI or YAML) or folder your playbooks use with -i"
    assert not (tmp_path / "r").exists()


def test_an_inventory_ansible_cannot_read_is_refused(tmp_path, capsys):
    inv = tmp_path / "lab.yml"
    inv.write_text("all:\n  hosts: [not, a, mapping\n")
    code, _, err = cli(capsys, "fleet", "doctor", str(inv), "--results-dir", str(tmp_path / "r"))
    assert code == 2 and err.startswith("rtforge: error: reading the inventory") and len(err.splitlines()) == 1
    # Ansible's reason, which it wraps onto the lines after its [WARNING], is kept: where the mistake is
    assert f"appears to be in '{inv}': line 3, column 1" in err, err


@pytest.mark.slow
def test_a_users_ansible_verbosity_does_not_break_reading_the_inventory(tmp_path, capsys, monkeypatch):
    """ANSIBLE_VERBOSITY makes ansible-inventory and ansible print lines of their own before their answer
    (it was read as JSON and as host names: a traceback)."""
    monkeypatch.setenv("ANSIBLE_VERBOSITY", "4")
    inv = tmp_path / "lab.ini"
    inv.write_text(nowhere(2))
    code, out, err = cli(capsys, "fleet", "doctor", str(inv), "--results-dir", str(tmp_path / "r"))
    assert "Traceback" not in err and code == 1, err
    assert re.findall(r"^\s*(pi-0[12])\s+│\s+unreachable", out, re.M) == ["pi-01", "pi-02"], out


@pytest.mark.slow
def test_a_bad_variable_names_its_board_before_anything_starts(tmp_path, capsys):
    inv = tmp_path / "lab.ini"
    inv.write_text(f"[rack]\n{nowhere(2)}\n[rack:vars]\nrtforge_interval_us=1000\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "pi-02.yml").write_text("rtforge_cpus: 3-1\n")
    code, _, err = cli(capsys, "fleet", "latency", str(inv), "--results-dir", str(tmp_path / "r"))
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("rtforge: error: pi-02: rtforge_cpus") and "3-1" in err
    assert not (tmp_path / "r").exists()            # no record, no run: nothing started
    code, _, err = cli(capsys, "fleet", "latency", str(inv), "--limit", "pi-01", "--duration", "2",
                       "--results-dir", str(tmp_path / "r"))
    assert code == 2 and "pi-01: --duration" in err and "no unit" in err
    code, _, err = cli(capsys, "fleet", "latency", str(inv), "--limit", "pi-7*", "--results-dir", str(tmp_path / "r"))
    assert code == 2 and "--limit pi-7* names no host of the inventory" in err


def test_a_host_named_like_this_machine_is_refused(tmp_path, capsys):
    """'local' and 'localhost' are this machine to every rtforge command, never a board over ssh."""
    inv = tmp_path / "lab.ini"
    inv.write_text(f"{nowhere(1)}localhost ansible_host=127.0.0.1 ansible_port={free_port()}\n")
    code, _, err = cli(capsys, "fleet", "doctor", str(inv), "--results-dir", str(tmp_path / "r"))
    assert code == 2 and len(err.splitlines()) == 1
    assert "the inventory host localhost is what rtforge calls this machine" in err
    assert not (tmp_path / "r").exists()


def test_a_password_login_is_refused_by_the_play_before_any_board(tmp_path, capsys):
    inv = tmp_path / "lab.ini"
    inv.write_text(f"[rack]\n{nowhere(2)}\n[rack:vars]\nansible_password=hunter2\n")
    code, _, err = cli(capsys, "fleet", "latency", str(inv), "--duration", "2s", "--results-dir", str(tmp_path / "r"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "logs in with a password" in err and "hunter2" not in err
    assert list((tmp_path / "r" / "fleet").iterdir()) == []   # the record of a campaign that never began is gone


def test_without_ansible_playbook_the_debian_package_is_named(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        for name in (os.listdir(d) if os.path.isdir(d) else []):
            if not name.startswith("ansible") and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(os.path.join(d, name))
    inv = tmp_path / "lab.ini"
    inv.write_text(nowhere(1))
    p = subprocess.run([*RTFORGE, "fleet", "latency", str(inv)], capture_output=True, text=True,
                       env={**os.environ, "PATH": str(bin_dir), "RTFORGE_RESULTS_DIR": str(tmp_path / "r")})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "ansible-playbook (ansible-core)" in p.stderr and "apt-get install ansible-core" in p.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv, says", [
    (["deploy", "--serial", "0"], "--serial '0' is not a list of batch sizes"),
    (["deploy"], "deploy what to pi-01?"),
    (["deploy", "--timeout", "5"], "--timeout"),
    (["latency", "--forks", "0"], "--forks 0 is out of range"),
    (["report", "-o", "fleet.pdf"], "the fleet report is HTML"),
    (["report", "-o", "f.html", "--cycle-time", "1"], "has no unit"),
])
def test_options_are_checked_first(tmp_path, capsys, argv, says):
    inv = tmp_path / "lab.ini"
    inv.write_text(nowhere(1))
    code, _, err = cli(capsys, "fleet", argv[0], str(inv), *argv[1:], "--results-dir", str(tmp_path / "r"))
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_summary_fits_80_columns_and_says_what_each_board_came_to(tmp_path):
    inv = tmp_path / "lab.ini"
    inv.write_text(f"[rack]\n{nowhere(2)}")
    env = {**os.environ, "RTFORGE_RESULTS_DIR": str(tmp_path / "r"), "TERM": "xterm"}
    code, shown = run_on_pty([*RTFORGE, "fleet", "latency", str(inv), "--duration", "2s", "--retries", "0"], env,
                             columns=80)
    assert code == 1, shown
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown).replace("\r", "")
    # the live table is redrawn in place (and erased); the summary stays: it starts at its header
    lines = [ln for ln in text.splitlines() if ln.strip()]
    lines = lines[max(i for i, ln in enumerate(lines) if "result" in ln and "board" in ln):]
    assert max(len(ln) for ln in lines) <= 80, [ln for ln in lines if len(ln) > 80]
    assert any(ln.startswith(" pi-01") and "unreachable" in ln for ln in lines)
    assert "2 boards: 2 unreachable" in text and "the same command again resumes" in text
    # --json: the same, for scripts
    p = subprocess.run([*RTFORGE, "fleet", "latency", str(inv), "--duration", "2s", "--retries", "0", "--json"],
                       capture_output=True, text=True, env=env)
    result = json.loads(p.stdout)
    assert p.returncode == 1 and result["resumed"] is True and result["counts"] == {"unreachable": 2}
    assert [b["host"] for b in result["boards"]] == ["pi-01", "pi-02"]


@pytest.mark.root
@pytest.mark.slow
def test_a_rolling_deploy_passes_an_unreachable_board_and_stops_at_the_first_refusal(tmp_path):
    from ..support.fleetboards import Rack
    from ..support.simpi import make_bundle

    bundle, _ = make_bundle(tmp_path / "bundle")   # a Pi 4 kernel: every rack board (x86_64) refuses it
    rack = Rack.start(3)
    try:
        inv = tmp_path / "lab.ini"
        rack.inventory(inv)
        first = f"[rack]\npi-00 ansible_host=127.0.0.1 ansible_port={rack.dead_port}\n"
        inv.write_text(inv.read_text().replace("[rack]\n", first))
        env = {**os.environ, "RTFORGE_RESULTS_DIR": str(tmp_path / "r")}
        p = subprocess.run([*RTFORGE, "fleet", "deploy", str(inv), str(bundle), "--serial", "1", "--retries", "0",
                            "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 1, p.stderr
        boards = {b["host"]: b for b in json.loads(p.stdout)["boards"]}
        assert boards["pi-00"]["outcome"] == "unreachable"                 # not touched: the rolling goes on
        assert boards["pi-01"]["outcome"] == "refused" and "bundle is for aarch64" in boards["pi-01"]["message"]
        assert boards["pi-02"]["outcome"] == boards["pi-03"]["outcome"] == "not reached"   # stopped there
        assert not any(b["ok"] for b in boards.values())
    finally:
        rack.stop()


def test_the_collection_runs_from_ansible_playbook_itself(tmp_path):
    """For those who write their own plays: the playbooks by name, the ssh config role, a board's outcome."""
    from rtforge.fleet.playbook import COLLECTIONS

    inv = tmp_path / "lab.ini"
    inv.write_text(f"[rack]\n{nowhere(1)}")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1"}
    p = subprocess.run(["ansible-playbook", "-i", str(inv), "rtforge.rtforge.latency", "-e",
                        json.dumps({"rtforge_command": RTFORGE, "rtforge_duration": "2s", "rtforge_retries": 0,
                                    "rtforge_ssh_config": str(tmp_path / "ssh_config"),
                                    "rtforge_results_dir": str(tmp_path / "r")})],
                       capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, p.stdout + p.stderr                # the board failed: Ansible's own exit status
    assert '"outcome": "unreachable"' in p.stdout and "pi-01" in p.stdout
    assert "Host pi-01" in (tmp_path / "ssh_config").read_text()


@pytest.mark.parametrize("module, args, says", [
    ("latency", {"host": "pi-01", "loops": "many"}, "argument 'loops' is of type"),
    ("fetch", {"host": "pi-01", "colour": "red"}, "Unsupported parameters"),
])
def test_the_modules_arguments_are_checked_by_ansibles_own_validator(tmp_path, module, args, says):
    """The modules run in Ansible's worker (their action plugins): their arguments are still checked against
    each module's ARGUMENT_SPEC, as a module's are, before rtforge is run."""
    from rtforge.fleet.playbook import COLLECTIONS

    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"hosts": "all", "gather_facts": False,
                                 "tasks": [{f"rtforge.rtforge.{module}": args, "delegate_to": "localhost"}]}]))
    inv = tmp_path / "lab.ini"
    inv.write_text(nowhere(1))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "rtforge.rtforge.events"}
    p = subprocess.run(["ansible-playbook", "-i", str(inv), str(play)], capture_output=True, text=True, env=env,
                       timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)
    events = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    failed = [e for e in events if e.get("event") == "failed"]
    assert p.returncode == 2 and len(failed) == 1, p.stdout + p.stderr
    assert failed[0]["host"] == "pi-01" and failed[0]["result"]["outcome"] == "refused"
    assert says in failed[0]["result"]["msg"]


def test_options_a_task_leaves_out_are_the_hosts_rtforge_variables(tmp_path):
    """The roles' tasks name only the host: the action plugin takes each other option from the host's
    rtforge_<option> variable (templated), and an option the task gives wins over the variable."""
    from rtforge.fleet.playbook import COLLECTIONS

    record = tmp_path / "argv"
    # the rtforge command, replaced by one that writes down how it was called (and refuses, exit 2)
    command = ["/bin/sh", "-c", f'printf "%s\\n" "$@" > {record}; exit 2', "rtforge"]
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": [
        {"rtforge.rtforge.latency": {"host": "{{ inventory_hostname }}", "duration": "3s"}}]}]))
    inv = tmp_path / "lab.yml"
    inv.write_text(json.dumps({"all": {
        "hosts": {"pi-01": {"ansible_host": "127.0.0.1", "rtforge_cpus": "0-1", "rtforge_duration": "9s"}},
        "vars": {"rtforge_interval_us": "500", "rtforge_base": 7, "rtforge_command": command,
                 "rtforge_label": "{{ inventory_hostname }} {{ rtforge_base }}"}}}))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "rtforge.rtforge.events"}
    p = subprocess.run(["ansible-playbook", "-i", str(inv), str(play)], capture_output=True, text=True, env=env,
                       timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr   # the recorder refused: the task failed
    argv = record.read_text().splitlines()
    assert argv[:2] == ["latency", "pi-01"], argv
    pairs = dict(zip(argv[2:], argv[3:]))
    assert pairs["--cpus"] == "0-1" and pairs["--interval-us"] == "500"   # host var, group var
    assert pairs["--duration"] == "3s"                                      # the task's own, not rtforge_duration
    assert pairs["--label"] == "pi-01 7"                                    # a variable that is a template


@pytest.mark.slow   # ~3.5 s of ansible-playbook: make check holds the FROM_VARS test above
def test_an_ini_inventorys_strings_are_read_as_the_tasks_own_templates_would_and_only_for_its_board(tmp_path):
    """[group:vars] in INI are strings: a list given there is a list, as "{{ rtforge_command }}" made it.
    A task run for one host about another board (a loop on localhost, say) takes no host's variables."""
    from rtforge.fleet.playbook import COLLECTIONS

    record = tmp_path / "calls"
    recorder = tmp_path / "rec.sh"
    recorder.write_text(f'printf "%s " "$@" >> {record}; echo >> {record}; exit 2\n')
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": [
        {"rtforge.rtforge.doctor": {"host": "{{ inventory_hostname }}"}, "ignore_errors": True},
        {"rtforge.rtforge.doctor": {"host": "pi-02", "rtforge": ["/bin/sh", str(recorder)]},
         "ignore_errors": True}]}]))
    inv = tmp_path / "lab.ini"
    inv.write_text("pi-01 ansible_host=127.0.0.1\n[all:vars]\nrtforge_isolate=3\n"
                   f'rtforge_command=["/bin/sh", "{recorder}"]\n')
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "rtforge.rtforge.events"}
    p = subprocess.run(["ansible-playbook", "-i", str(inv), str(play)], capture_output=True, text=True, env=env,
                       timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)
    calls = record.read_text().splitlines() if record.exists() else []
    assert len(calls) == 2, p.stdout + p.stderr
    assert calls[0].split()[:2] == ["doctor", "pi-01"] and "--isolate 3" in calls[0]   # the INI list ran
    assert calls[1].split()[:2] == ["doctor", "pi-02"] and "--isolate" not in calls[1]  # not pi-01's variable


@pytest.mark.slow
def test_rtforge_fleet_leaves_ansibles_second_check_of_the_variables_out(tmp_path, capsys):
    """rtforge fleet has checked every board's variables itself: the roles' argument validation (a task per
    board and role) is skipped (--skip-tags always), and the play still runs each board's task."""
    inv = tmp_path / "lab.ini"
    inv.write_text(nowhere(1))
    code, out, err = cli(capsys, "fleet", "fetch", str(inv), "--results-dir", str(tmp_path / "r"))
    assert code == 1, out + err                                                     # the board is unreachable
    (record,) = (tmp_path / "r" / "fleet").iterdir()
    actions = {json.loads(ln).get("action") for ln in (record / "events.jsonl").read_text().splitlines()}
    assert "rtforge.rtforge.fetch" in actions and "ansible.builtin.validate_argument_spec" not in actions
    # and no task of the collection's own is tagged always, which the skip would drop too
    from rtforge.fleet.playbook import COLLECTIONS

    plays = (COLLECTIONS / "ansible_collections/rtforge/rtforge").glob("[rp]*/**/*.yml")
    assert not [p for p in plays if "always" in p.read_text() and "argument_specs" not in p.name]
