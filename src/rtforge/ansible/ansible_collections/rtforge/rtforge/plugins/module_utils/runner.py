# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)
"""Running one rtforge command for one board, on the controller.

The modules of this collection run where Ansible runs them (delegated to
localhost) under whatever Python Ansible uses there, which need not be the
one rtforge is installed in: so they use the standard library only and
drive the rtforge *command*, never its Python library.  rtforge does the
per-board work and keeps its own promises (a board's run outlives a
dropped connection; bad input is one sentence and exit status 2); this
file turns its exit status and that sentence into an outcome Ansible can
act on (retry an unreachable board, stop a rolling deploy on a fallback).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import time

# What a board's result is, in the words the fleet summary uses.
OK = "ok"                   # the command did what was asked (a run stored, a kernel committed)
UNREACHABLE = "unreachable"  # SSH never got through: nothing was started there
LOST = "lost"               # the board dropped mid-run and did not come back in time: the run goes on there
BUSY = "busy"               # the board was already measuring another run
FELL_BACK = "fell back"     # deploy: the new kernel was not kept; the board boots its previous one
REFUSED = "refused"         # rtforge said no for this board (a CPU it lacks, a tool missing there)
INTERRUPTED = "interrupted"  # Ctrl-C or a signal from outside; a board's run goes on
FAILED = "failed"           # anything else: an internal error, with its traceback's last line

_ERROR = re.compile(r"^rtforge: error: (.*)$", re.M)
_LET_GO = re.compile(r"the run (\S+) goes on on ")
_BUSY = re.compile(r"already measuring \(run (\S+?)\)")
_SPAN = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# The first thing each command asks a board: a connection lost there was never made, so nothing changed on
# it.  Lost anywhere else (a deploy between its steps), the board may be half-way: that is a failure.
FIRST_CONTACT = ("(during reading the board's facts)", "(during reading the target's /proc and /sys)",
                 "(during listing the runs on the target)")
STOP_GRACE_S = 90.0     # rtforge lets go of a run within seconds; cleaning up a refused start takes a connect timeout

# The options of every module that runs rtforge for one board, and the host variables that fill those a task
# leaves out (plugin_utils/oncontroller.py); doc_fragments/command.py documents them.
BOARD_SPEC = dict(host=dict(type="str", required=True), ssh_config=dict(type="path"),
                  rtforge=dict(type="list", elements="str", default=["rtforge"]))
BOARD_VARS = dict(ssh_config="rtforge_ssh_config", rtforge="rtforge_command")


def span_s(text):
    """'90s', '10m', '1h30m', '1.5h', '2d' -> seconds; None for anything else
    (rtforge itself refuses it later, in its own words)."""
    t = str(text).strip()
    parts = _SPAN.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


class Finished(object):
    def __init__(self, argv, rc, out, err, timed_out, seconds, forked=False):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err
        self.timed_out, self.seconds = timed_out, seconds
        self.forked = forked   # run by rtforge fleet's fork server rather than an exec of the command

    @property
    def sentence(self):
        """rtforge's own one-line error, else the last line it printed."""
        found = _ERROR.findall(self.err)
        if found:
            return found[-1].strip()
        lines = [ln.strip() for ln in (self.err or self.out).splitlines() if ln.strip()]
        return lines[-1] if lines else "exit status %d" % self.rc

    def json(self):
        try:
            return json.loads(self.out)
        except ValueError:
            return None


def run(argv, deadline_s=None, env=None):
    """Run rtforge; at the deadline ask it to let go (SIGTERM: rtforge lets go of
    a board's run, which goes on there, and prints its id), then wait for that."""
    server = _forkserver(argv)
    if server is not None:
        forked = _run_forked(server[0], argv, argv[server[1]:], deadline_s, env)
        if forked is not None:
            return forked
        # no server there (its play ended, or it never was this one's), or it said no: exec the command
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env)
    timed_out = False
    try:
        out, err = p.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
    return Finished(argv, p.returncode, out or "", err or "", timed_out, time.monotonic() - t0)


def _forkserver(argv):
    """(socket, length of the command) when rtforge fleet runs this play under its fork server
    (rtforge.cli.forkserver) and argv is the command it serves."""
    try:
        server = json.loads(os.environ.get("RTFORGE_FORKSERVER") or "null")
        cmd = list(server["command"])
        return (server["socket"], len(cmd)) if argv[:len(cmd)] == cmd else None
    except (ValueError, TypeError, KeyError):
        return None


def _run_forked(path, argv, args, deadline_s, env):
    """run() through the fork server: the child writes into our pipes; we signal its pid.
    None when no child was started (the caller then execs the command)."""
    t0 = time.monotonic()
    sent = _send_request(path, args, env)
    if sent is None:
        return None
    child = _ForkedChild(*sent)
    child.follow(t0, deadline_s)
    if child.pid is None:   # refused (a bad request, a failed fork) or gone before it forked: nothing ran
        return None
    out, err = (b"".join(child.chunks[fd]).decode(errors="replace") for fd in (child.out_r, child.err_r))
    # the server went away before the child's end (it was killed): no status to give
    status = -signal.SIGKILL if child.status is None else child.status
    return Finished(argv, status, out, err, child.timed_out, time.monotonic() - t0, forked=True)


def _send_request(path, args, env):
    """(connection, stdout's read end, stderr's read end) once the server has the request and the
    pipes' write ends; None when it cannot be reached."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        conn.connect(path)
        request = (json.dumps({"argv": args, "env": dict(os.environ if env is None else env),
                               "cwd": os.getcwd()}) + "\n").encode()
        sent = socket.send_fds(conn, [request], [out_w, err_w])
        conn.sendall(request[sent:])
    except OSError:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        conn.close()
        return None
    os.close(out_w)
    os.close(err_w)
    return conn, out_r, err_r


class _ForkedChild(object):
    """A command the fork server runs for us: what the server says of it (its pid, then its exit
    status), its output, and whether the deadline came."""

    def __init__(self, conn, out_r, err_r):
        self.conn, self.out_r, self.err_r = conn, out_r, err_r
        self.chunks = {out_r: [], err_r: []}
        self.answers, self.buffered = [], b""
        self.pid, self.status = None, None
        self.timed_out, self.stop_at = False, None

    def follow(self, t0, deadline_s):
        """Read the server and both pipes to their ends (everything is closed then)."""
        sel = selectors.DefaultSelector()
        for fd in (self.out_r, self.err_r, self.conn):
            sel.register(fd, selectors.EVENT_READ)
        try:
            while sel.get_map():
                self.watch(time.monotonic(), t0, deadline_s)
                for key, _ in sel.select(timeout=1.0):
                    if key.fileobj is self.conn:
                        self.read_server(sel)
                    else:
                        self.read_output(sel, key.fd)
        finally:
            sel.close()
            self.conn.close()
            os.close(self.out_r)
            os.close(self.err_r)

    def watch(self, now, t0, deadline_s):
        """At the deadline ask the child to let go (SIGTERM); STOP_GRACE_S later, kill it."""
        if self.pid is None or self.status is not None:
            return
        if not self.timed_out and deadline_s is not None and now - t0 > deadline_s:
            self.timed_out, self.stop_at = True, now + STOP_GRACE_S
            _signal(self.pid, signal.SIGTERM)
        elif self.stop_at is not None and now > self.stop_at:
            self.stop_at = None
            _signal(self.pid, signal.SIGKILL)

    def read_server(self, sel):
        """The server's answers, one JSON line each; it is done when it said an error or hung up."""
        try:
            data = self.conn.recv(65536)
        except OSError:
            data = b""
        self.buffered += data
        while b"\n" in self.buffered:
            line, self.buffered = self.buffered.split(b"\n", 1)
            self.answers.append(json.loads(line))
        self.pid = next((a["pid"] for a in self.answers if "pid" in a), self.pid)
        self.status = next((a["status"] for a in self.answers if "status" in a), self.status)
        if any("error" in a for a in self.answers) or not data:
            sel.unregister(self.conn)

    def read_output(self, sel, fd):
        data = os.read(fd, 65536)
        if data:
            self.chunks[fd].append(data)
        else:
            sel.unregister(fd)


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass   # it ended a moment ago: its status is on its way


def outcome(f, command):
    """(outcome, message) of a finished rtforge command."""
    if f.rc == 0:
        return OK, ""
    if f.rc == 130 or f.timed_out:
        m = _LET_GO.search(f.err)
        if f.timed_out:
            if m:
                return LOST, ("the board did not answer until the deadline; its run %s goes on there and is "
                              "collected when the command is run again" % m.group(1))
            return LOST, "no answer before the deadline (%.0f s): %s" % (f.seconds, f.sentence)
        return INTERRUPTED, (("let go of run %s, which goes on on the board" % m.group(1)) if m else "interrupted")
    if f.rc == 1 and command == "deploy":
        return FELL_BACK, f.sentence
    if f.rc == 2:
        s = f.sentence
        if s.startswith("cannot reach ") or (s.startswith("lost the connection to ") and
                                             any(step in s for step in FIRST_CONTACT)):
            return UNREACHABLE, s
        if _BUSY.search(s):
            return BUSY, s
        return REFUSED, s
    return FAILED, f.sentence


def let_go_run(f):
    """The id of the run rtforge let go of (it goes on on the board), if it said one."""
    m = _LET_GO.search(f.err)
    return m.group(1) if m else None


_RUNNING = re.compile(r"^(\S+) is still running on ", re.M)


def still_running(f):
    """Runs `rtforge fetch` left on the board because they are still measuring."""
    return _RUNNING.findall(f.err)


def started_after(run_id, since):
    """Run ids begin with their start, YYYYmmdd-HHMMSS in UTC (the controller's clock)."""
    if not since:
        return False
    digits = re.sub(r"[^0-9]", "", since)[:14]
    return re.sub(r"[^0-9]", "", run_id[:15]) >= digits


def busy_run(f):
    m = _BUSY.search(f.err)
    return m.group(1) if m else None


def base_argv(params, command, host):
    """rtforge COMMAND HOST --ssh-config FILE [--results-dir DIR]."""
    argv = list(params["rtforge"]) + [command, host]
    if params.get("ssh_config"):
        argv += ["--ssh-config", params["ssh_config"]]
    if params.get("results_dir") and command not in ("deploy", "doctor"):
        argv += ["--results-dir", params["results_dir"]]
    return argv


def run_summary(shown):
    """The few figures of `rtforge show --json` a fleet summary needs."""
    if not isinstance(shown, dict):
        return {}
    every = shown.get("all") or {}
    return {k: shown.get(k) for k in ("run_id", "label", "state", "partial", "host", "start_time", "duration_s",
                                      "kernel_release", "preempt_model", "max_ns")} | {
        "p99_ns": every.get("p99_ns"), "count": every.get("count"),
        "interval_us": (shown.get("config") or {}).get("interval_us")}
