"""One way to run things on a target (architecture rule 2, docs/architecture.md).

A transport runs argv lists, never shell strings: ``LocalTransport`` with
subprocess, ``SshTransport`` (ssh.py) through the OpenSSH client,
quoting each argument for the remote shell.  Everything else a target offers
-- reading and writing files, uploading trees, privileges -- is written once,
here, in terms of ``run``, so the two transports cannot drift apart.

``spawn`` starts a process in its own session so that a terminal's Ctrl-C
reaches only rtforge (which then stops everything in order) and so that its
process group can be killed as a whole; it also asks the kernel to send
SIGTERM if rtforge itself dies, so a SIGKILLed rtforge leaves no load running.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO

from ... import paths
from ...errors import UserError
from . import safesh
from .facts import uid_is_root

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)

# Write to a new temporary file (mktemp: never through a link another user
# put there), flush it to storage, then rename: a reader (or a power cut)
# sees the old file or the new one, never half of one.  "$1" is the path,
# passed as an argument, so nothing in it is interpreted.
_ATOMIC_WRITE = safesh.script('rtforge_write "$1" "$2"')
# A file's bytes, bounded, from a regular file only (a FIFO would block, /dev/zero never end).
# Status 1: there is no such file; NOT_REGULAR: refused.
_READ = safesh.script('[ -e "$1" ] || [ -L "$1" ] || exit 1; rtforge_cat "$1" "$2"; s=$?; [ $s = 1 ] && s=2; exit $s')


def _what(argv: list[str], step: str | None) -> str:
    if step:
        return step
    shown = shlex.join(argv)
    return f"`{shown if len(shown) < 80 else shown[:77] + '...'}`"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn_here(argv, *, log=None, errors_only=False) -> subprocess.Popen:
    """Start a process on this machine in a session of its own, dying with
    us; its output appended to `log` (errors_only: stderr alone)."""
    if not log:
        return _popen_here(argv, subprocess.DEVNULL, errors_only)
    # closed here once the child is started: it holds its own copy
    with os.fdopen(paths.open_existing(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as out:
        return _popen_here(argv, out, errors_only)


def _popen_here(argv, out: IO[bytes] | int, errors_only: bool) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if errors_only else out,
        stderr=out if errors_only else subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


# What a failed command's stderr says that a user can act on, and the sentence for it.
_CAUSES = (("No space left on device", "its disk is full: free some space there and try again"),
           ("Disk quota exceeded", "a disk quota is exceeded: free some space there and try again"),
           ("Read-only file system", "the file system is read-only: remount it read-write and try again"),
           ("Permission denied", "permission was denied: run as root, or give the login sudo"))
_GENERIC = ("Exiting with failure status", "Error exit delayed from previous errors")


def failure_detail(stderr: str, returncode: int, where: str) -> str:
    """The line of a failed command's stderr that says why (tar ends with
    "Exiting with failure status", which does not), with what to do when
    the cause is a known one."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for needle, sentence in _CAUSES:
        if hit := next((ln for ln in lines if needle in ln), None):
            return f"{hit[:300]} -- {sentence}"
    telling = [ln for ln in lines if not any(g in ln for g in _GENERIC)]
    return (telling or lines or [f"exit status {returncode}"])[-1][:300]


class CommandFailed(UserError):
    """A command on the target failed; the message holds its stderr."""


class ConnectionLost(UserError):
    """The connection to the target failed or dropped; the message names the step."""


class UploadDamaged(UserError):
    """A file arrived on the target with another sha256 than it left with."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _local_sums(local: Path) -> dict[str, str]:
    """{path relative to local: sha256} of every file of a tree ("" for a file)."""
    if not local.is_dir():
        return {"": sha256_file(local)}
    return {str(p.relative_to(local)): sha256_file(p) for p in sorted(local.rglob("*")) if p.is_file()}


def parse_sha256sum(out: str) -> dict[str, str]:
    """{name: digest} from sha256sum output.  GNU coreutils escapes a name
    holding a backslash, newline or carriage return and marks the line with a
    leading '\\'."""
    sums = {}
    for line in out.split("\n"):
        escaped = line.startswith("\\")
        line = line[1:] if escaped else line
        digest, _, name = line.partition("  ")
        if not name:
            continue
        if escaped:
            name = name.replace("\\\\", "\0").replace("\\n", "\n").replace("\\r", "\r").replace("\0", "\\")
        sums[name] = digest
    return sums


# Every file below "$1", hashed on the target; names come back as ./rel.
_TREE_SUMS = "find . -type f -exec sha256sum -- {} +"


class Transport(ABC):
    name: str

    def __init__(self) -> None:
        self._is_root: bool | None = None

    # -- what each transport provides -----------------------------------
    @abstractmethod
    def _exec(self, argv: list[str], *, input: bytes | None, timeout: float | None) -> subprocess.CompletedProcess:
        """Run argv on the target; stdout/stderr captured as bytes."""

    @abstractmethod
    def spawn(self, argv: list[str], *, log: Path | None = None, errors_only: bool = False) -> subprocess.Popen:
        """Start in its own session; output appended to log (or discarded).
        errors_only: only stderr goes to the log (a load such as `cat
        /dev/zero` writes its data to stdout, which must not fill the disk)."""

    # -- built on _exec ----------------------------------------------------
    def _call(self, argv, input, timeout, step) -> subprocess.CompletedProcess:
        try:
            return self._exec(argv, input=input, timeout=timeout)
        except ConnectionLost as e:
            raise ConnectionLost(f"{e} (during {step})" if step else str(e)) from None

    def run(
        self,
        argv: list[str],
        *,
        input: str | bytes | None = None,
        timeout: float | None = None,
        sudo: bool = False,
        check: bool = False,
        step: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run argv (as root with sudo=True); text output.  check=True turns a
        non-zero exit into CommandFailed naming the step."""
        if sudo and not self.is_root():
            argv = ["sudo", "-n", "--", *argv]
        data = input.encode() if isinstance(input, str) else input
        raw = self._call(argv, data, timeout, step)
        proc = subprocess.CompletedProcess(
            raw.args, raw.returncode, raw.stdout.decode(errors="replace"), raw.stderr.decode(errors="replace")
        )
        if sudo and proc.returncode and "sudo:" in proc.stderr and "password" in proc.stderr:
            raise UserError(
                f"sudo on {self.name} needs a password: allow this user passwordless sudo (e.g. "
                f"'USER ALL=(ALL) NOPASSWD: ALL' in /etc/sudoers.d/rtforge) or connect as root"
            )
        if check and proc.returncode:
            raise CommandFailed(f"{_what(argv, step)} failed on {self.name}: "
                                f"{failure_detail(proc.stderr, proc.returncode, self.name)}")
        return proc

    def run_bytes(self, argv: list[str], *, sudo: bool = False, step: str | None = None) -> bytes:
        if sudo and not self.is_root():
            argv = ["sudo", "-n", "--", *argv]
        raw = self._call(argv, None, None, step)
        if raw.returncode:
            detail = failure_detail(raw.stderr.decode(errors="replace"), raw.returncode, self.name)
            raise CommandFailed(f"{_what(argv, step)} failed on {self.name}: {detail}")
        return raw.stdout

    def local_argv(self, argv: list[str]) -> list[str]:
        """The command run here that runs argv on the target."""
        return argv

    def local_env(self) -> dict[str, str] | None:
        """The environment of that command (None: this process's)."""
        return None

    def run_to_file(self, argv: list[str], dest: Path, *, limit: int, sudo: bool = False,
                    step: str | None = None) -> int:
        """argv's output streamed into dest, never more than limit bytes: what
        a target sends (a fetched run) is not trusted to be as small as it
        says.  Returns the size; UserError when the limit is passed or it failed."""
        if sudo and not self.is_root():
            argv = ["sudo", "-n", "--", *argv]
        size = 0
        with os.fdopen(paths.create_new(dest), "wb") as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(self.local_argv(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, env=self.local_env())
            assert proc.stdout is not None
            try:
                while chunk := proc.stdout.read(1 << 20):
                    size += len(chunk)
                    if size > limit:
                        raise UserError(f"{self.name} sent more than {limit >> 20:,} MiB for {_what(argv, step)}, "
                                        "more than a run holds: nothing was stored; look at the run there")
                    out.write(chunk)
            finally:
                if proc.poll() is None and size > limit:
                    proc.kill()
                proc.wait()
            err.seek(0)
            stderr = err.read(1 << 16).decode(errors="replace")
        if proc.returncode:
            self._raise_lost(proc.returncode, stderr)
            raise CommandFailed(f"{_what(argv, step)} failed on {self.name}: "
                                f"{failure_detail(stderr, proc.returncode, self.name)}")
        return size

    def _raise_lost(self, returncode: int, stderr: str) -> None:  # noqa: B027 -- a hook: local runs lose nothing
        """A transport that can lose its connection says so here (SSH: exit status 255)."""

    def note_root(self, is_root: bool) -> None:
        """What the target's facts said of `id -u` (read in the same round trip): is_root need not ask."""
        self._is_root = is_root

    def is_root(self) -> bool:
        """Whether commands run as root there (then sudo is not needed): asked once."""
        if self._is_root is None:
            self._is_root = uid_is_root(self._exec(["id", "-u"], input=None, timeout=30).stdout.decode())
        return self._is_root

    def which(self, program: str) -> str | None:
        r = self.run(["sh", "-c", 'command -v "$1"', "sh", program])
        return r.stdout.strip() or None if r.returncode == 0 else None

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path]).returncode == 0

    def read_bytes(self, path: str, *, sudo: bool = False, step: str | None = None,
                   limit: int = safesh.READ_LIMIT) -> bytes:
        """A regular file's bytes, at most `limit` of them: a FIFO, a device
        or a folder there is refused (UserError), not read; a missing file is
        CommandFailed."""
        data = self.read_optional(path, sudo=sudo, step=step, limit=limit)
        if data is None:
            raise CommandFailed(f"{step or f'reading {path}'} failed on {self.name}: there is no {path}")
        return data

    def read_optional(self, path: str, *, sudo: bool = False, step: str | None = None,
                      limit: int = safesh.READ_LIMIT, head: bool = False) -> bytes | None:
        """read_bytes, or None when there is no such file.  head: the first
        `limit` bytes are wanted (a kernel image's header), not the whole file."""
        argv = ["sh", "-c", _READ, "sh", path, str(limit if head else limit + 1)]
        if sudo and not self.is_root():
            argv = ["sudo", "-n", "--", *argv]
        raw = self._call(argv, None, None, step)
        if raw.returncode == 1 and not raw.stdout:
            return None
        if raw.returncode == safesh.NOT_REGULAR:
            raise UserError(f"{path} on {self.name} is not a regular file (a FIFO, a device, a folder, or a "
                            "link out of the tree): rtforge reads only regular files there; remove it")
        if raw.returncode:
            detail = failure_detail(raw.stderr.decode(errors="replace"), raw.returncode, self.name)
            raise CommandFailed(f"{step or f'reading {path}'} failed on {self.name}: {detail}")
        if len(raw.stdout) > limit:
            raise UserError(f"{path} on {self.name} is larger than {limit:,} bytes, far more than rtforge "
                            "reads there: is it the file it should be?")
        return raw.stdout

    def read_text(self, path: str, *, sudo: bool = False, step: str | None = None,
                  limit: int = safesh.READ_LIMIT) -> str:
        return self.read_bytes(path, sudo=sudo, step=step, limit=limit).decode(errors="replace")

    def write_bytes(
        self, path: str, data: bytes, *, mode: str = "644", sudo: bool = False, step: str | None = None
    ) -> None:
        """Atomically replace path with data (temp file, sync, rename)."""
        self.run(
            ["sh", "-c", _ATOMIC_WRITE, "sh", path, mode],
            input=data,
            sudo=sudo,
            check=True,
            step=step or f"writing {path}",
        )

    def write_then_run(self, path: str, data: bytes, argv: list[str], *, sudo: bool = False,
                       timeout: float | None = None, step: str | None = None) -> subprocess.CompletedProcess:
        """write_bytes(path, data), then argv, in one round trip; argv's result
        (a failed write: its own non-zero status, argv not run)."""
        return self.run(["sh", "-c", _ATOMIC_WRITE + ' || exit; shift 2; exec "$@"', "sh", path, "644", *argv],
                        input=data,
                        sudo=sudo, timeout=timeout, step=step or f"writing {path}")

    def put(self, local: Path, remote: str, *, sudo: bool = False, step: str | None = None) -> None:
        self.write_bytes(
            remote, Path(local).read_bytes(), mode=f"{Path(local).stat().st_mode & 0o777:o}", sudo=sudo, step=step
        )

    def put_tree(self, local_dir: Path, remote_dir: str, *, sudo: bool = False, step: str | None = None,
                 then: str = "") -> str:
        """Copy a directory's contents with tar over the transport; `then`, a
        shell command run in the same round trip (in remote_dir, after the
        copy), gives its standard output back."""
        tar = subprocess.run(
            ["tar", "-C", str(local_dir), "--owner=0", "--group=0", "-cf", "-", "."], capture_output=True, check=True
        ).stdout
        # one round trip: a board on Wi-Fi (and a controller starting 32 boards) pays for each
        script = 'mkdir -p -- "$1" && tar -C "$1" --no-same-owner -xf -' + (f' && cd "$1" && {then}' if then else "")
        return self.run(["sh", "-c", script, "sh", remote_dir], input=tar, sudo=sudo, check=True, step=step).stdout

    def sha256(self, paths: list[str], *, sudo: bool = False, step: str | None = None) -> dict[str, str]:
        """sha256 of each file, computed on the target."""
        return parse_sha256sum(self.run(["sha256sum", "--", *paths], sudo=sudo, check=True, step=step).stdout)

    def put_verified(
        self,
        local: Path,
        remote: str,
        *,
        expected: dict[str, str] | None = None,
        sudo: bool = False,
        step: str | None = None,
    ) -> None:
        """Upload a file (to the path `remote`) or a directory's contents (into
        the directory `remote`), then hash every file on the target and
        compare: the one way anything is uploaded (deploy, remote runs,
        bench), so no caller can forget the check (architecture rule 5).

        expected: {path relative to `local`: sha256} to hold the target to,
        e.g. a bundle's manifest (the source of truth, not the local copy);
        by default every local file is hashed here.  Files on the target that
        are not listed are not judged.  A damaged or missing file raises
        UploadDamaged naming it."""
        local = Path(local)
        want = _local_sums(local) if expected is None else expected
        step = step or f"uploading to {remote}"
        if local.is_dir():
            # hashed by the command that unpacked it, from what is on the target's disk now
            out = self.put_tree(local, remote, sudo=sudo, step=step, then=_TREE_SUMS)
            got = {name.removeprefix("./"): digest for name, digest in parse_sha256sum(out).items()}
        else:
            self.put(local, remote, sudo=sudo, step=step)
            got = {"": self.sha256([remote], sudo=sudo, step=f"checking the upload ({step})").get(remote, "")}
        bad = [
            (rel, "is missing" if rel not in got else "differs")
            for rel, digest in sorted(want.items())
            if got.get(rel) != digest
        ]
        if bad:
            rel, how = bad[0]
            where = f"{remote}/{rel}" if rel else remote
            more = f" ({len(bad)} files are damaged or missing)" if len(bad) > 1 else ""
            raise UploadDamaged(
                f"the upload to {self.name} is damaged: {where} {how} from what was sent{more}; "
                "check the target's free space, storage and network, then try again"
            )

    def close(self) -> None:  # noqa: B027 -- a hook: only SSH holds a connection
        """Release connections (nothing to do locally)."""


class LocalTransport(Transport):
    name = "this machine"

    def _exec(self, argv, *, input, timeout):
        return subprocess.run(argv, input=input, capture_output=True, timeout=timeout)

    def spawn(self, argv, *, log=None, errors_only=False):
        return spawn_here(argv, log=log, errors_only=errors_only)

    def which(self, program):
        return shutil.which(program)

    def is_root(self):
        return uid_is_root(os.geteuid())
