# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)
"""The inventory's connection variables as an OpenSSH client config.

rtforge reaches a board with the user's own `ssh` (keys, agent, jump hosts
and known_hosts as ever), by a Host alias: so each inventory host becomes
`Host <inventory name>` with HostName, Port, User and IdentityFile from
ansible_host, ansible_port, ansible_user and ansible_ssh_private_key_file,
and the `-o Key=Value` (and -J, -i, -p, -l, -F, -4, -6, -C) of
ansible_ssh_common_args / ansible_ssh_extra_args.  Anything ssh could not
be given this way (a password, another connection plugin, an option of
ssh's command line with no config keyword) is refused by name, before any
board is touched: a silently dropped option would reach another machine,
or the right one another way.

Pure standard library, no Ansible: the ssh_config module and tests use it.
"""

from __future__ import annotations

import re
import shlex

SSH_CONNECTIONS = ("ssh", "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh", "ansible.builtin.paramiko_ssh")
_FLAG_WORDS = {"-J": "ProxyJump", "-i": "IdentityFile", "-p": "Port", "-l": "User", "-F": "Include"}
_SWITCHES = {"-4": ("AddressFamily", "inet"), "-6": ("AddressFamily", "inet6"), "-C": ("Compression", "yes")}
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_KEYWORD = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


class Refused(ValueError):
    """One sentence: which host, which variable, what to do."""


def _value(host: str, what: str, value) -> str:
    text = str(value)
    if not text or any(c in text for c in '"\n\r\0') or not text.isprintable():
        raise Refused(f"{host}: {what} {text!r} cannot be written into an ssh config (empty, a quote or a "
                      "control character)")
    return f'"{text}"' if any(c.isspace() for c in text) else text


def ssh_args(host: str, var: str, text: str) -> list[tuple[str, str]]:
    """(keyword, value) pairs of ssh command-line arguments as Ansible passes them."""
    try:
        words = shlex.split(text or "")
    except ValueError as e:
        raise Refused(f"{host}: {var} cannot be read ({e})") from None
    out, i = [], 0
    while i < len(words):
        w = words[i]
        if w in _SWITCHES:
            out.append(_SWITCHES[w])
            i += 1
            continue
        flag, rest = w[:2], w[2:]
        if flag == "-o" or flag in _FLAG_WORDS:
            if not rest:
                if i + 1 >= len(words):
                    raise Refused(f"{host}: {var} ends with {w} and no value after it")
                rest = words[i + 1]
                i += 1
            i += 1
            if flag != "-o":
                out.append((_FLAG_WORDS[flag], rest))
                continue
            key, sep, value = rest.partition("=")
            if not sep:
                key, _, value = rest.partition(" ")
            if not _KEYWORD.match(key.strip()) or not value.strip():
                raise Refused(f"{host}: {var} has '-o {rest}', which is not Keyword=value")
            out.append((key.strip(), value.strip()))
            continue
        raise Refused(f"{host}: {var} has '{w}', which rtforge cannot give ssh through a config file: use "
                      "-o Keyword=value, or put it in your ssh config (~/.ssh/config)")
    return out


def host_block(h: dict) -> list[str]:
    """The lines of one board: h has name, and optionally host, port, user, key, connection, password (bool),
    common_args, extra_args (strings as in the inventory)."""
    name = str(h.get("name") or "")
    if not _NAME.match(name):
        raise Refused(f"the inventory host {name!r} cannot be an ssh Host alias: use letters, digits, '.', '_' "
                      "and '-' (set its address in ansible_host)")
    connection = h.get("connection")
    if connection and connection not in SSH_CONNECTIONS:
        raise Refused(f"{name} has ansible_connection={connection}: rtforge reaches boards over ssh only")
    if h.get("password"):
        raise Refused(f"{name} logs in with a password (ansible_password / ansible_ssh_pass): rtforge logs in "
                      "with keys only (BatchMode); give it a key (ssh-copy-id) and ansible_ssh_private_key_file")
    lines = [f"Host {name}", f"  HostName {_value(name, 'ansible_host', h.get('host') or name)}"]
    for key, var, word in (("port", "ansible_port", "Port"), ("user", "ansible_user", "User"),
                           ("key", "ansible_ssh_private_key_file", "IdentityFile")):
        if h.get(key) not in (None, ""):
            lines.append(f"  {word} {_value(name, var, h[key])}")
    if h.get("port") not in (None, "") and not str(h["port"]).isdigit():
        raise Refused(f"{name}: ansible_port {h['port']!r} is not a port number")
    for var in ("common_args", "extra_args"):
        for word, value in ssh_args(name, f"ansible_ssh_{var}", h.get(var) or ""):
            lines.append(f"  {word} {_value(name, 'ansible_ssh_' + var, value)}")
    return lines


def render(hosts: list[dict], includes: list[str] | tuple[str, ...] = ()) -> str:
    """The whole file.  ssh takes the first value it meets for each keyword,
    so the boards' own lines come first and the user's configs (which -F
    would otherwise skip) after, for everything the inventory does not say."""
    blocks = ["# Written by rtforge from an Ansible inventory: one Host per inventory host.",
              "# Regenerated at every run; edit the inventory, not this file.", ""]
    for h in hosts:
        blocks += host_block(h) + [""]
    if includes:
        blocks.append("Match all")
        blocks += [f"  Include {_value('the ssh config', 'include', p)}" for p in includes]
    return "\n".join(blocks) + "\n"
