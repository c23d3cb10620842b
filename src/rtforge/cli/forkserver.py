"""One rtforge, imported once, forked for every board of a play.

`rtforge fleet` starts one rtforge per board (the collection's modules run
the rtforge command).  On a controller with few CPUs, starting 32 Pythons
that each import rtforge (typer, rich, numpy: ~0.3 s of CPU each) delays
the last board's start by seconds.  So the play runs under this server:

    python -m rtforge.cli.forkserver SOCKET -- ansible-playbook ARGS...

It listens on SOCKET (a Unix socket in a private temporary folder),
starts the play with RTFORGE_FORKSERVER in its environment, imports the
commands the modules run, and then, for each request, forks: the child is
`rtforge ARGS` with the requester's standard output and error (passed as
file descriptors), environment and working folder -- what an exec of the
command would be, minus the start.  The requester (module_utils/runner.py,
in Ansible's Python) gets the child's pid, to signal it at a deadline, and
later its exit status.  A play run without the server (a user's own
ansible-playbook) execs the command as before.

The server is the play's parent, in the session rtforge fleet made for it,
so a Ctrl-C passed to that session reaches the play, its workers and every
forked rtforge, as it did without it.  It ends when the play has ended and
every child is reaped, with the play's exit status.

Protocol, one connection per run: the request is one JSON line
{"argv", "env", "cwd"} sent with two descriptors (stdout, stderr); the
answers are the lines {"pid": N} and, when the child is reaped,
{"status": exit status as subprocess gives it (-N: killed by signal N)}.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import traceback

from ..fleet.drive import RTFORGE_COMMAND
from . import prepare, run

ENV = "RTFORGE_FORKSERVER"
# The commands the collection's modules run (imported and built before forking); numpy they import late.
COMMANDS = ("latency", "attach", "fetch", "deploy", "doctor")
MAX_REQUEST = 1 << 20   # an environment and a command line


# Ctrl-C before the play is started (the server's imports, ~0.3 s) ends the
# server by the signal's default action: as a Ctrl-C should, and without the
# KeyboardInterrupt traceback Python's own handler would leave in the record.
# (A SIGINT the server was started with ignored stays ignored, as before.)
BOOT = ("import signal\n"
        "if signal.getsignal(signal.SIGINT) is signal.default_int_handler:\n"
        "    signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
        "import runpy\n"
        "runpy.run_module('rtforge.cli.forkserver', run_name='__main__', alter_sys=True)\n")


def serve_argv(sock: str, play: list[str]) -> list[str]:
    """The play's command line, run under a server listening on sock (rtforge fleet's play wrapper).
    -P: no working folder on sys.path, as each forked rtforge works in its requester's folder."""
    return [sys.executable, "-P", "-c", BOOT, sock, "--", *play]


class Server:
    def __init__(self, path: str, play: list[str]):
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(128)   # the play's first requests may come while the imports run
        self.pending: dict[int, socket.socket] = {}   # child pid -> its requester
        self.play_status: int | None = None
        env = {**os.environ, ENV: json.dumps({"socket": path, "command": RTFORGE_COMMAND})}
        # reaped by waitpid(-1) below, never by Popen: its status is kept here
        self.play = subprocess.Popen(play, env=env, stdin=subprocess.DEVNULL)
        # only now: an ignored signal stays ignored across exec, and the play must act on Ctrl-C
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def serve(self) -> int:
        try:
            prepare(COMMANDS)
            importlib.import_module("numpy")
        except Exception:   # the children import what they need themselves: slower, not wrong
            traceback.print_exc()
        # Everything imported so far outlives every child: out of the collector's sight, a child's
        # collections do not visit (and so write to, and so copy page by page) the objects it shares
        # with this server.  A forked rtforge's kernel time is mostly such copies and its exit.
        gc.freeze()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)   # a handler, so the wake-up fd is written
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        self._reap()
        while self.play_status is None or self.pending:
            for key, _ in sel.select():
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    os.read(wake_r, 4096)
            self._reap()
        return self.play_status

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            if pid == self.play.pid:
                self.play_status = code
            elif (conn := self.pending.pop(pid, None)) is not None:
                _send(conn, {"status": code})
                conn.close()

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:   # the requester gave up, or no descriptor is left: it execs the command
            return
        fds: list[int] = []
        try:
            conn.settimeout(10.0)
            data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
            while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
                more = conn.recv(MAX_REQUEST)
                if not more:
                    break
                data += more
            request = _checked(json.loads(data), fds)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except Exception as e:   # a bad request or a failed fork: that requester alone is told (it execs)
            for fd in fds:
                os.close(fd)
            _send(conn, {"error": str(e) or type(e).__name__})
            conn.close()
            return
        if pid == 0:
            self._child(request, fds, conn)   # never returns
        for fd in fds:
            os.close(fd)
        self.pending[pid] = conn
        _send(conn, {"pid": pid})

    def _child(self, request: dict, fds: list[int], conn: socket.socket) -> None:
        code = 1
        try:
            child_signals()
            self.listener.close()
            conn.close()
            for other in self.pending.values():
                other.close()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in (devnull, *fds):
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["rtforge", *request["argv"]]
            run()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)


def child_signals() -> None:
    """A forked rtforge's signals as a fresh interpreter's: SIGINT raises KeyboardInterrupt, SIGTERM
    and SIGCHLD are default, and SIGPIPE stays ignored (Python's own setting: a write to a closed
    pipe, say ssh's stdin, is an error rtforge handles, not its death)."""
    signal.set_wakeup_fd(-1)
    for s in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def _checked(request, fds: list[int]) -> dict:
    if len(fds) != 2:
        raise ValueError("a request comes with two descriptors")
    if not (isinstance(request, dict) and isinstance(request.get("argv"), list)
            and all(isinstance(a, str) for a in request["argv"]) and isinstance(request.get("cwd"), str)
            and isinstance(request.get("env"), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())):
        raise ValueError("a request is {argv: [str], env: {str: str}, cwd: str}")
    return request


def _send(conn: socket.socket, message: dict) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass   # the requester is gone (its worker was killed): nothing to tell


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m rtforge.cli.forkserver SOCKET -- PLAY-COMMAND...", file=sys.stderr)
        return 2
    # Ctrl-C reaches the whole session: the play and the forked rtforges act on it; the server ignores
    # it, to reap them and pass on their exit statuses.  SIGTERM (rtforge fleet's last resort) ends it.
    try:
        server = Server(argv[0], argv[2:])
    except OSError as e:   # no socket (a path too long for one, say): the play runs unserved
        print(f"rtforge: the fork server could not listen ({e}); each board's rtforge starts on its own",
              file=sys.stderr)
        os.execvp(argv[2], argv[2:])
    try:
        status = server.serve()
    finally:
        try:
            os.unlink(argv[0])
        except OSError:
            pass
    if status < 0:   # the play was killed by a signal: so is this, as rtforge fleet's child
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
