"""A board over SSH, through the user's own OpenSSH client.

Using `ssh` itself (not a Python SSH library) means the user's
~/.ssh/config, keys, agent, jump hosts and known_hosts all apply unchanged.
Host-key checking is never switched off.  A ControlMaster socket in a
private directory makes the many small commands of a deploy cheap (one TCP
and key exchange for all of them).

Each argv is quoted for the remote shell with shlex, and the destination is
separated from ssh's options by "--", so neither a hostile host name nor a
hostile path can become an option or a command.  OpenSSH finds
~/.ssh/config through the passwd entry's home, not $HOME: --ssh-config FILE
(ssh -F) covers tests and unusual setups.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ... import tools
from ...errors import UserError
from .transport import ConnectionLost, Transport, spawn_here

# user@host, host, host:port is not accepted (use --port or ssh_config)
_DEST_RE = re.compile(r"^(?:[A-Za-z0-9._][A-Za-z0-9._-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])$")
# What OpenSSH prints when the connection itself fails (exit status 255).
_CONNECTION_ERRORS = ("Connection refused", "Connection timed out", "Connection closed", "Connection reset",
                      "Broken pipe", "No route to host", "Could not resolve hostname", "Network is unreachable",
                      "Operation timed out", "kex_exchange_identification", "Timeout, server", "port 22:",
                      "Connection to ", "mux_client")
# ssh's words when no connection was made at all ("ssh: connect to host H port P: Connection refused")
_NEVER_CONNECTED = ("connect to host ", "Could not resolve hostname")


def check_destination(destination: str) -> str:
    if not _DEST_RE.match(destination):
        raise UserError(
            f"'{destination}' is not a host to connect to: use HOST or USER@HOST "
            "(a name from your ssh config, a host name or an address)"
        )
    return destination


class SshTransport(Transport):
    def __init__(self, destination: str, *, ssh_config: Path | None = None, port: int | None = None,
                 connect_timeout: int = 10):
        super().__init__()
        tools.require(["ssh"], "reaching a board")
        self.destination = check_destination(destination)
        self.name = destination
        self._reached = False   # a command has run there: a refused connection then is one lost
        self.ssh_config = ssh_config
        if ssh_config is not None and not Path(ssh_config).is_file():
            raise UserError(f"--ssh-config {ssh_config} is not a file")
        # A private directory for the control socket: nobody else may use
        # (or hijack) the authenticated connection.
        self._ctl_dir = tempfile.mkdtemp(prefix="rtforge-ssh-")
        self.options = [
            "-o", "BatchMode=yes",               # never hang on a password prompt
            "-o", f"ConnectTimeout={connect_timeout}",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={self._ctl_dir}/%C",
            "-o", "ControlPersist=120",
            "-o", "ServerAliveInterval=5",       # notice a dead link in ~15 s
            "-o", "ServerAliveCountMax=3",
        ]
        if ssh_config is not None:
            self.options = ["-F", str(ssh_config), *self.options]
        if port is not None:
            self.options += ["-p", str(port)]

    def command(self, argv: list[str]) -> list[str]:
        """The local ssh command that runs argv on the board."""
        return ["ssh", *self.options, "--", self.destination, shlex.join(argv)]

    def local_argv(self, argv: list[str]) -> list[str]:
        return self.command(argv)

    def _raise_lost(self, returncode: int, stderr: str) -> None:
        self._raise_for_ssh(returncode, stderr)

    def _raise_for_ssh(self, returncode: int, stderr: str) -> None:
        if returncode != 255:
            return
        err = stderr.strip()
        if "Host key verification failed" in err or "REMOTE HOST IDENTIFICATION HAS CHANGED" in err:
            raise UserError(
                f"the host key of {self.destination} is unknown or has changed: check it, then connect once "
                f"with `ssh {self.destination}` to record it (rtforge never turns host-key checking off)"
            )
        if "Permission denied" in err:
            raise UserError(
                f"{self.destination} refused the SSH login ({err.splitlines()[-1]}): set up key login "
                f"(ssh-copy-id {self.destination}) or name the key in your ssh config"
            )
        if any(sig in err for sig in _CONNECTION_ERRORS) or not err:
            last = err.splitlines()[-1] if err else "no reply"
            # never reached (a refused port, a name that does not resolve) is not a connection lost:
            # the board cannot be reached, and a fleet counts it so
            never = not self._reached and any(sig in last for sig in _NEVER_CONNECTED)
            how = "cannot reach" if never else "lost the connection to"
            raise ConnectionLost(f"{how} {self.destination}: {last}")

    def _exec(self, argv, *, input, timeout):
        try:
            proc = subprocess.run(self.command(argv), input=input, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ConnectionLost(f"{self.destination} did not answer within {timeout:.0f} s") from None
        self._raise_for_ssh(proc.returncode, proc.stderr.decode(errors="replace"))
        self._reached = True
        return proc

    def spawn(self, argv, *, log=None, errors_only=False):
        return spawn_here(self.command(argv), log=log, errors_only=errors_only)

    def master_pid(self) -> int | None:
        """pid of the ControlMaster process (tests cut the connection with it)."""
        r = subprocess.run(
            ["ssh", *self.options, "-O", "check", "--", self.destination], capture_output=True, text=True
        )
        m = re.search(r"pid=(\d+)", r.stderr + r.stdout)
        return int(m.group(1)) if m else None

    def close(self) -> None:
        subprocess.run(["ssh", *self.options, "-O", "exit", "--", self.destination], capture_output=True)
        shutil.rmtree(self._ctl_dir, ignore_errors=True)
