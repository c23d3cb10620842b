"""The events callback (what rtforge fleet reads) slows Ansible's polling for results
from 1 ms to 50 ms, only where the user's configuration does not set it.

What the play really uses is read inside it: a lookup plugin written here runs in the
play's worker, a fork of the main process that polls, and returns the constant it sees."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

LOOKUP = '''
from ansible import constants as C
from ansible.plugins.lookup import LookupBase

class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [C.DEFAULT_INTERNAL_POLL_INTERVAL]
'''


def poll_interval_seen(tmp_path, config: str | None) -> float:
    from rtforge.fleet.playbook import COLLECTIONS

    (tmp_path / "lookup").mkdir()
    (tmp_path / "lookup" / "poll_interval.py").write_text(LOOKUP)
    (tmp_path / "play.yml").write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.debug": {"msg": "{{ lookup('poll_interval') }}"}}]}]))
    (tmp_path / "inv.ini").write_text("h1 ansible_connection=local\n")
    # the configuration Ansible reads is this one alone (not a ~/.ansible.cfg or /etc/ansible's of this machine)
    (tmp_path / "ansible.cfg").write_text(config or "")
    env = {**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
           "ANSIBLE_STDOUT_CALLBACK": "rtforge.rtforge.events", "ANSIBLE_LOOKUP_PLUGINS": str(tmp_path / "lookup"),
           "ANSIBLE_NOCOLOR": "1"}
    p = subprocess.run(["ansible-playbook", "-i", "inv.ini", "play.yml"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    ok = [e for e in map(json.loads, p.stdout.splitlines()) if e["event"] == "ok"]
    assert len(ok) == 1, p.stdout
    return float(ok[0]["result"]["msg"])


def test_the_callback_slows_the_main_processs_polling(tmp_path):
    assert poll_interval_seen(tmp_path, None) == pytest.approx(0.05)


@pytest.mark.slow   # ~2.5 s of ansible-playbook: make check holds the default case
def test_a_users_own_setting_stands(tmp_path):
    assert poll_interval_seen(tmp_path, "[defaults]\ninternal_poll_interval = 0.004\n") == pytest.approx(0.004)
