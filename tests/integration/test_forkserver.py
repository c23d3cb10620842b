"""rtforge fleet's fork server, from the requester's side: the collection's
module_utils/runner.py, in Debian's Python (Ansible's), asks the server for
each rtforge, as the modules do under `rtforge fleet`.

A forked rtforge must be what an exec of the command would be: the same
output and exit status, the requester's environment and working folder,
and a pid the requester's deadline reaches (SIGTERM: the run is kept,
interrupted).  A command the server does not serve, or a server that is
gone, is exec'd as before.  The "play" here is a small script in place of
ansible-playbook; the e2e fleet tests run the real one through the server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rtforge
from rtforge.cli import forkserver
from rtforge.fleet.drive import RTFORGE_COMMAND

RUNNER = (Path(rtforge.__file__).parent / "ansible/ansible_collections/rtforge/rtforge/plugins/module_utils/runner.py")
ANSIBLE_PYTHON = "/usr/bin/python3"   # Debian's ansible-core runs the modules' code with it
CORPUS = Path(__file__).resolve().parents[1] / "corpus/cyclictest/amro-h10000-3t.txt"

# The play: each call through runner.run, what it returned written as JSON.
PLAY = r"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec); spec.loader.exec_module(runner)
out = []
for call in json.loads(open(sys.argv[2]).read()):
    if call.get("cwd"):
        os.chdir(call["cwd"])
    env = dict(os.environ, **call["env"]) if call.get("env") else None
    f = runner.run(call["argv"], deadline_s=call.get("deadline_s"), env=env)
    out.append({"rc": f.rc, "out": f.out, "err": f.err, "timed_out": f.timed_out, "forked": f.forked,
                "seconds": f.seconds})
open(sys.argv[3], "w").write(json.dumps(out))
sys.exit(3)
"""


@pytest.fixture
def play(tmp_path):
    """Run calls through runner.run in a play under the server (or, serve=False, without it)."""
    if not shutil.which(ANSIBLE_PYTHON):
        pytest.skip("Debian's python3 is not installed")
    script = tmp_path / "play.py"
    script.write_text(PLAY)

    def go(calls: list[dict], serve: bool = True) -> tuple[int, list[dict], Path]:
        (tmp_path / "calls.json").write_text(json.dumps(calls))
        argv = [ANSIBLE_PYTHON, str(script), str(RUNNER), str(tmp_path / "calls.json"), str(tmp_path / "out.json")]
        sock = tmp_path / "sock"
        if serve:
            argv = forkserver.serve_argv(str(sock), argv)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert (tmp_path / "out.json").exists(), p.stderr
        return p.returncode, json.loads((tmp_path / "out.json").read_text()), sock

    return go


def test_a_forked_rtforge_says_what_an_execd_one_says(play):
    cmd = RTFORGE_COMMAND
    calls = [{"argv": cmd + ["--version"]},
             {"argv": cmd + ["latency", "--duration", "soon"]},
             {"argv": cmd + ["no-such-command"]}]
    rc, served, sock = play(calls)
    _, execd, _ = play(calls, serve=False)
    assert rc == 3, "the server ends with the play's exit status"
    assert not sock.exists(), "the server removes its socket"
    assert [r["forked"] for r in served] == [True] * 3 and [r["forked"] for r in execd] == [False] * 3
    assert served[0]["out"] == execd[0]["out"] == f"rtforge {rtforge.__version__}\n"
    for s, e in zip(served, execd):
        assert (s["rc"], s["out"], s["err"]) == (e["rc"], e["out"], e["err"])
    assert served[1]["rc"] == 2 and served[1]["err"].startswith("rtforge: error: ")


def test_the_requesters_folder_and_environment_are_the_childs(play, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(CORPUS, work / "out.txt")
    store = tmp_path / "store-from-env"
    rc, (r,), _ = play([{"argv": RTFORGE_COMMAND + ["import", "out.txt", "--json"], "cwd": str(work),
                         "env": {"RTFORGE_RESULTS_DIR": str(store)}}])
    assert r["forked"] and r["rc"] == 0, r["err"]
    run = json.loads(r["out"])
    assert (store / "runs" / run["run_id"]).is_dir(), "stored where the requester's environment said"


@pytest.mark.root
@pytest.mark.slow
def test_the_deadline_reaches_the_forked_rtforge_which_keeps_what_it_measured(play, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("SCHED_FIFO needs root")
    store = tmp_path / "store"
    rc, (r,), _ = play([{"argv": RTFORGE_COMMAND + ["latency", "--duration", "60s", "--cpus", "0",
                                                         "--interval-us", "10000", "--results-dir", str(store),
                                                         "--json"],
                         "deadline_s": 3}])
    assert r["forked"] and r["timed_out"]
    assert r["rc"] == 130, r["err"]
    assert json.loads(r["out"])["state"] == "interrupted", "rtforge said what it kept"
    assert r["seconds"] < 30, "SIGTERM ended it long before its 60 s"
    stored = [json.loads(p.read_text()) for p in store.glob("runs/*/result.json")]
    assert len(stored) == 1 and stored[0]["state"] == "interrupted"


def test_a_command_the_server_does_not_serve_or_a_gone_server_is_execd(play, tmp_path):
    other = [sys.executable, "-I", "-m", "rtforge"]   # not the server's command line: exec'd
    rc, (r,), _ = play([{"argv": other + ["--version"]}])
    assert not r["forked"] and r["rc"] == 0 and r["out"] == f"rtforge {rtforge.__version__}\n"
    gone = json.dumps({"socket": str(tmp_path / "no-such-socket"), "command": RTFORGE_COMMAND})
    rc, (r,), _ = play([{"argv": RTFORGE_COMMAND + ["--version"], "env": {forkserver.ENV: gone}}],
                       serve=False)
    assert not r["forked"] and r["rc"] == 0


def _ask(sock: Path, request: bytes) -> tuple[list[dict], bytes]:
    """One raw request: its answers and what the child wrote on its standard output."""
    import socket

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(sock))
        socket.send_fds(conn, [request], [out_w, err_w])
        os.close(out_w)
        os.close(err_w)
        with os.fdopen(out_r, "rb") as out, os.fdopen(err_r, "rb"):
            written = out.read()
            answers = [json.loads(line) for line in conn.makefile("rb")]
    return answers, written


@pytest.mark.slow
def test_a_malformed_request_is_refused_and_the_server_serves_on(tmp_path):
    sock = tmp_path / "sock"
    server = subprocess.Popen(forkserver.serve_argv(str(sock), ["sleep", "3"]), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for bad in (b"not json\n", b'{"argv": "--version", "env": {}, "cwd": "/"}\n',
                    b'{"argv": ["--version"], "env": {"A": 1}, "cwd": "/"}\n'):
            answers, written = _ask(sock, bad)
            assert len(answers) == 1 and "error" in answers[0] and written == b"", bad
        good = json.dumps({"argv": ["--version"], "env": dict(os.environ), "cwd": str(tmp_path)}).encode() + b"\n"
        answers, written = _ask(sock, good)
        assert [sorted(a) for a in answers] == [["pid"], ["status"]] and answers[1]["status"] == 0
        assert written == f"rtforge {rtforge.__version__}\n".encode()
        assert server.wait(timeout=60) == 0, server.stderr.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_forked_rtforge_has_a_fresh_interpreters_signals():
    """SIGPIPE ignored (a write to a closed pipe is an error rtforge handles, as Python starts),
    SIGINT a KeyboardInterrupt, SIGTERM and SIGCHLD default -- whatever the server had set."""
    import signal

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # pragma: no cover (the child reports through the pipe)
        try:
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
                signal.signal(s, signal.SIG_IGN)   # as a server might have them
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            forkserver.child_signals()
            said = [signal.getsignal(s) for s in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)]
            os.write(w, repr([s is signal.default_int_handler if callable(s) else int(s) for s in said]).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        said = f.read()
    os.waitpid(pid, 0)
    assert said == repr([int(signal.SIG_IGN), True, int(signal.SIG_DFL), int(signal.SIG_DFL)])


def _sigint_state(pid: int) -> str | None:
    """'caught', 'ignored' or 'default': what SIGINT does to pid now (None: it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    masks = {ln[:6]: int(ln.split()[1], 16) for ln in status.splitlines() if ln[:6] in ("SigCgt", "SigIgn")}
    bit = 1 << (2 - 1)   # SIGINT is 2
    return "caught" if masks["SigCgt"] & bit else "ignored" if masks["SigIgn"] & bit else "default"


# Holds the server in its imports (the first import of the fleet's driver) until the test's signal.
HOLD = """
import importlib.abc, os, sys, time
class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "rtforge.fleet.drive":
            open(os.environ["RTFORGE_TEST_HELD"], "w").close()
            while True:
                time.sleep(0.01)
        return None
sys.meta_path.insert(0, Hold())
"""


def test_ctrl_c_while_the_server_starts_ends_it_quietly_before_the_play(tmp_path):
    """rtforge fleet passes Ctrl-C to the play's session; during the server's first ~0.3 s (its imports)
    that ended it with a KeyboardInterrupt traceback in the record's ansible.stderr.  Now the
    signal's default action ends it: killed by SIGINT, nothing on stderr, and no play started.
    The server is held in its imports by an import hook (sitecustomize), so the signal lands there."""
    import signal

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOLD)
    held, started = tmp_path / "held", tmp_path / "play-started"
    play = [sys.executable, "-c", f"open({str(started)!r}, 'w').close(); import time; time.sleep(30)"]
    env = {**os.environ, "PYTHONPATH": str(site), "RTFORGE_TEST_HELD": str(held)}
    server = subprocess.Popen(forkserver.serve_argv(str(tmp_path / "sock"), play), stdin=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not held.exists() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert held.exists(), "the server never reached its imports"
        assert _sigint_state(server.pid) == "default", "Ctrl-C in the server's imports would raise KeyboardInterrupt"
        os.killpg(server.pid, signal.SIGINT)
        assert server.wait(timeout=10) == -signal.SIGINT
        assert server.stderr.read() == b""
        assert not started.exists()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
