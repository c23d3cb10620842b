"""The collection's pure parts, which run under Ansible's own Python on the
controller: the ssh config written from connection variables, and how an
rtforge exit status and sentence become a board's outcome."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

UTILS = (Path(__file__).resolve().parents[3] / "src/rtforge/ansible/ansible_collections/rtforge/rtforge/plugins"
         / "module_utils")


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"rtforge_collection_{name}", UTILS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sshconfig = load("sshconfig")
runner = load("runner")


def test_each_host_becomes_a_host_alias_that_ssh_reads_back(tmp_path):
    text = sshconfig.render([
        {"name": "pi-01", "host": "10.0.0.7", "port": "2222", "user": "pi", "key": "~/.ssh/lab key",
         "common_args": "-o ProxyJump=gw -o StrictHostKeyChecking=yes", "extra_args": "-C -4"},
        {"name": "pi-02"}], includes=["/nonexistent/config"])
    cfg = tmp_path / "cfg"
    cfg.write_text(text)
    seen = subprocess.run(["ssh", "-F", str(cfg), "-G", "pi-01"], capture_output=True, text=True, check=True).stdout
    got = dict(line.split(" ", 1) for line in seen.splitlines())
    assert got["hostname"] == "10.0.0.7" and got["port"] == "2222" and got["user"] == "pi"
    assert got["proxyjump"] == "gw" and got["compression"] == "yes" and got["addressfamily"] == "inet"
    assert "lab key" in got["identityfile"]
    seen = subprocess.run(["ssh", "-F", str(cfg), "-G", "pi-02"], capture_output=True, text=True, check=True).stdout
    assert "hostname pi-02" in seen.splitlines()      # no ansible_host: the inventory name is the address


@pytest.mark.parametrize("host, says", [
    ({"name": "pi-01", "password": True}, "logs in with a password"),
    ({"name": "pi-01", "connection": "docker"}, "ansible_connection=docker"),
    ({"name": "pi 01"}, "cannot be an ssh Host alias"),
    ({"name": "pi-01", "host": "10.0.0.1\n  ProxyCommand sh"}, "control character"),
    ({"name": "pi-01", "port": "ssh"}, "not a port number"),
    ({"name": "pi-01", "common_args": "-R 80:localhost:80"}, "'-R'"),
    ({"name": "pi-01", "common_args": "-o"}, "no value after it"),
    ({"name": "pi-01", "extra_args": "-o 'unbalanced"}, "cannot be read"),
])
def test_what_ssh_could_not_be_given_is_refused_by_name(host, says):
    with pytest.raises(sshconfig.Refused) as e:
        sshconfig.render([host])
    assert says in str(e.value) and "\n" not in str(e.value)


class F:
    def __init__(self, rc, err="", out="", timed_out=False):
        self.rc, self.err, self.out, self.timed_out, self.seconds = rc, err, out, timed_out, 1.0

    sentence = runner.Finished.sentence


@pytest.mark.parametrize("f, command, outcome", [
    (F(0), "latency", "ok"),
    (F(2, "rtforge: error: cannot reach pi-03 over SSH (ssh: connect ...): check the host name"), "latency",
     "unreachable"),
    (F(2, "rtforge: error: pi-03 is already measuring (run 20261122-1454-pi-03-ab12); two runs ..."), "latency",
     "busy"),
    (F(2, "rtforge: error: --cpus 7 is not a CPU of pi-03"), "latency", "refused"),
    (F(1, "rtforge: error: not deployed"), "deploy", "fell back"),
    (F(1, "Traceback ...\nValueError: x"), "latency", "failed"),
    (F(130, "the run 20261122-1454-pi-03-ab12 goes on on pi-03: `rtforge attach ...`", timed_out=True), "latency",
     "lost"),
    (F(130, "the run 20261122-1454-pi-03-ab12 goes on on pi-03: `rtforge attach ...`"), "latency", "interrupted"),
])
def test_an_exit_status_and_its_sentence_are_an_outcome(f, command, outcome):
    assert runner.outcome(f, command)[0] == outcome


def test_the_run_let_go_of_is_named_and_resumable():
    f = F(130, "rtforge: interrupted\nthe run 20261122-145400-pi-03-ab12 goes on on pi-03: `rtforge attach`",
          timed_out=True)
    assert runner.let_go_run(f) == "20261122-145400-pi-03-ab12"
    assert "20261122-145400-pi-03-ab12 goes on there" in runner.outcome(f, "latency")[1]
    fetched = F(0, "20261122-145400-pi-03-ab12 is still running on pi-03: `rtforge attach pi-03 ...` follows it\n")
    assert runner.still_running(fetched) == ["20261122-145400-pi-03-ab12"]
    assert runner.started_after("20261122-145400-pi-03-ab12", "2026-11-22T14:53:59+00:00")
    assert not runner.started_after("20261122-145400-pi-03-ab12", "2026-11-22T14:54:01+00:00")


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("10m", 600), ("1h30m", 5400), ("1.5h", 5400),
                                           ("2d", 172800), ("5", None), ("5x", None), ("", None), ("m5", None)])
def test_spans_read_as_rtforge_reads_them(text, seconds):
    assert runner.span_s(text) == seconds
