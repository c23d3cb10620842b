"""The user's inventory, as Ansible itself reads it.

rtforge never parses an inventory: INI, YAML, a folder of them, group_vars/
and host_vars/ beside it, an inventory plugin -- all of that is Ansible's.
`ansible-inventory --list` gives every host's variables, resolved through
groups, and `ansible all --list-hosts --limit PATTERN` which hosts a pattern
names, in the inventory's order (Ansible 2.14's ansible-inventory has no
--limit).  A source Ansible cannot read is an error here, not a warning: an
inventory that silently reads as empty would measure nothing and say "ok".
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .. import tools
from ..device.transport.hosts import board_host
from ..errors import UserError
from ..units import shown

ANSIBLE_TOOLS = ("ansible-playbook", "ansible-inventory", "ansible")
TIMEOUT_S = 300   # an inventory plugin may ask a cloud; a plain file takes a second


def require_ansible(what: str) -> None:
    """ansible-playbook and its kin, or one sentence naming Debian's package (before anything starts)."""
    tools.require(ANSIBLE_TOOLS, what)


def ansible_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Ansible's environment for rtforge: plain output, and an unreadable
    inventory source is a failure rather than a warning."""
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
           "ANSIBLE_RETRY_FILES_ENABLED": "False", "ANSIBLE_DEPRECATION_WARNINGS": "False",
           "ANSIBLE_LOCALHOST_WARNING": "False", "ANSIBLE_SYSTEM_WARNINGS": "False"}
    env.update(extra or {})
    return env


@dataclass
class Inventory:
    source: str                                             # as given: a file, a folder, or an inventory string
    hosts: list[str]                                        # the hosts the limit names, in the inventory's order
    hostvars: dict[str, dict] = field(default_factory=dict)  # every host's variables, groups applied
    groups: dict[str, list[str]] = field(default_factory=dict)

    def vars_of(self, host: str) -> dict:
        return self.hostvars.get(host) or {}


def _ansible(argv: list[str], what: str) -> str:
    try:
        # verbosity (a user's ANSIBLE_VERBOSITY or ansible.cfg) prints lines of its own on the standard output
        # these commands answer on: what they answer must be alone there
        p = subprocess.run(argv, capture_output=True, text=True, env=ansible_env({"ANSIBLE_VERBOSITY": "0"}),
                           timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UserError(f"{what} took more than {TIMEOUT_S} s: is an inventory plugin waiting on a network?") from None
    if p.returncode:
        raise UserError(f"{what} failed: {_first_error(p.stderr or p.stdout)}")
    return p.stdout


def _first_error(text: str) -> str:
    """Ansible's own complaint, on one line.  Ansible wraps a message at 79
    columns when its output is not a terminal (textwrap: at a space, which
    it drops, or after a hyphen): its lines up to the next ERROR!/[WARNING]
    are one message, and the reason ('line 4, column 5') is on the later ones."""
    messages: list[str] = []
    for ln in (ln.strip() for ln in text.splitlines()):
        if ln and (ln.startswith(("ERROR!", "[WARNING]")) or not messages):
            messages.append(ln)
        elif ln:
            messages[-1] += ("" if messages[-1].endswith("-") else " ") + ln
    picked = [m for m in messages if m.startswith(("ERROR!", "[WARNING]"))] or messages or ["no message"]
    one = re.sub(r"\s+", " ", re.sub(r"^(ERROR!|\[WARNING\]:)\s*(\*\s*)?", "", picked[0])).rstrip(".")
    return one if len(one) <= 600 else one[:599] + "…"


def check_source(source: str) -> str:
    if not source.strip():
        raise UserError("name the inventory: a file (INI or YAML) or a folder of them, as for ansible-playbook -i")
    if "," not in source:
        try:
            mode = Path(source).stat().st_mode
        except FileNotFoundError:
            raise UserError(f"the inventory {shown(source, 400)} does not exist: give the file (INI or YAML) or "
                            "folder your playbooks use with -i") from None
        except OSError as e:
            raise UserError(f"the inventory {shown(source, 400)} cannot be read: {e.strerror}") from None
        # Ansible would wait on a FIFO (or read a device) until its time-out, 300 s later
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UserError(f"the inventory {shown(source, 400)} is not a file or a folder (a FIFO, a device?): "
                            "give the file (INI or YAML) or folder your playbooks use with -i")
    return source


def load(source: str, limit: str | None = None) -> Inventory:
    """The inventory's hosts (those the limit names) and their variables."""
    check_source(source)
    require_ansible("rtforge fleet")
    what = f"reading the inventory {shown(source, 400)} (ansible-inventory)"
    argv = ["ansible", "all", "-i", source, "--list-hosts"] + (["--limit", limit] if limit else [])
    # the two read the same inventory side by side: each is a Python with Ansible to start (~0.5 s of CPU)
    with ThreadPoolExecutor(2) as pool:
        listing = pool.submit(_ansible, ["ansible-inventory", "-i", source, "--list"], what)
        naming = pool.submit(_ansible, argv, f"listing the hosts of {shown(source, 400)}")
    try:
        listed = json.loads(listing.result() or "{}")
    except ValueError:
        raise UserError(f"{what} gave no inventory: run ansible-inventory -i {shown(source, 400)} --list "
                        "and see what it prints") from None
    hostvars = (listed.get("_meta") or {}).get("hostvars") or {}
    groups = {g: list(v.get("hosts") or []) for g, v in listed.items() if g != "_meta" and isinstance(v, dict)}
    try:
        out = naming.result()
    except UserError as e:
        if limit and ("host pattern" in str(e) or "No hosts matched" in str(e)):
            out = ""   # Ansible's words for a limit that names nothing
        else:
            raise
    hosts = [ln.strip() for ln in out.splitlines()[1:] if ln.strip()]
    if not hosts:
        if limit:
            raise UserError(f"--limit {shown(limit)} names no host of the inventory {shown(source, 400)}")
        raise UserError(f"the inventory {shown(source, 400)} names no host")
    here = [h for h in hosts if board_host(h) is None]
    if here:  # every rtforge command would take it for this machine, not a board over ssh
        raise UserError(f"the inventory host {shown(here[0])} is what rtforge calls this machine: give the board "
                        "another inventory name and its address in ansible_host")
    return Inventory(source, hosts, {h: hostvars.get(h) or {} for h in hosts}, groups)
