"""The shell helpers every script rtforge runs on a target shares
(data/safe.sh documents them): a folder of rtforge's own is checked before
use -- its owner, who may write it and the folders above it -- and files are
read bounded and regular-only, and written through a fresh temporary file.

A board is often shared (a lab account, a kiosk user, a service account),
and rtforge runs as root there: a folder another user made, or a file they
put where rtforge reads or writes, must never become root's action.  What
breaks a rule ends the script with OWNED_STATUS and one line naming the
folder and its owner, which `owned_error` turns into the UserError the user
reads.
"""

from __future__ import annotations

import subprocess
from functools import cache
from importlib import resources

from ...errors import UserError

OWNED_STATUS = 77     # rtforge_owned refused a folder
NOT_REGULAR = 66      # rtforge_cat refused a file (not regular, or outside the tree)
READ_LIMIT = 1 << 20  # rtforge_cat's default bound: what a board's /proc or /boot file holds, and more

# rtforge's folder on a board: runs while they measure, deploys' uploads,
# tune's record.  Root's own (runs and deploys are root's there, through
# sudo for a login that is not root), never a world-writable place such as
# /var/tmp, where another user could make the folder first.
BOARD_DIR = "/var/lib/rtforge"


@cache
def functions() -> str:
    """The helpers' text, to put before a script that calls them."""
    return (resources.files("rtforge.data") / "safe.sh").read_text()


def script(body: str) -> str:
    """A script (for `sh -c`) that may call the helpers."""
    return functions() + "\n" + body


def owned_error(r: subprocess.CompletedProcess, where: str) -> UserError | None:
    """The UserError for a script that rtforge_owned stopped (None otherwise)."""
    if r.returncode != OWNED_STATUS:
        return None
    said = [ln.removeprefix("rtforge: ") for ln in (r.stderr or "").splitlines() if ln.startswith("rtforge: ")]
    detail = said[-1] if said else "a folder of rtforge's failed its owner check"
    return UserError(f"{where}: {detail}")


def ensure_owned(transport, *folders: str, readable: tuple[str, ...] = (), sudo: bool = True, step: str) -> None:
    """Each folder, in order, made or checked as rtforge's own on the target,
    or one sentence why not.  Made 0700; those in `readable` 0755 (readable
    by all, e.g. for doctor's login; written by none but the owner)."""
    pairs = [x for f in folders for x in ("755" if f in readable else "700", f)]
    # (the folder above the first is the system's -- /var/lib -- or a tree's, made as in the tree)
    body = 'mkdir -p -- "$(dirname -- "$2")"; while [ $# -ge 2 ]; do rtforge_owned -m "$1" "$2" || exit; shift 2; done'
    r = transport.run(["sh", "-c", script(body), "sh", *pairs], sudo=sudo, step=step)
    err = owned_error(r, f"on {transport.name}" if transport.name != "this machine" else "here")
    if err:
        raise err
    if r.returncode:
        raise UserError(f"cannot make {folders[-1]} on {transport.name} ({r.stderr.strip() or r.returncode})")
