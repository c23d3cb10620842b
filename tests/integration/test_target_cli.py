"""rtforge target info / deploy / kernels from the command line, over the loopback sshd."""

from __future__ import annotations

import json
import os

import pytest

from rtforge.cli import main

from ..support.simpi import make_bundle

pytestmark = pytest.mark.root


def test_target_info_over_ssh(sshd, capsys):
    assert main(["target", "info", "board", "--ssh-config", str(sshd.ssh_config), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    u = os.uname()
    assert (facts["machine"], facts["release"], facts["version"]) == (u.machine, u.release, u.version)
    assert facts["is_root"] is True and facts["tryboot_supported"] is False
    assert facts["preempt_model"] in ("dynamic", "full", "voluntary-or-none", "rt", "none", "voluntary", "lazy")
    assert main(["target", "info", "board-sudo", "--ssh-config", str(sshd.ssh_config)]) == 0
    out = capsys.readouterr().out
    assert "via sudo -n" in out and u.release in out


def test_deploy_to_the_wrong_machine_is_refused(sshd, capsys, tmp_path):
    bundle, _ = make_bundle(tmp_path / "bundle")
    assert main(["deploy", "board", str(bundle), "--ssh-config", str(sshd.ssh_config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rtforge: error: board is {os.uname().machine} but the bundle is for aarch64")
    assert len(err.splitlines()) == 1
    assert not os.path.exists("/var/lib/rtforge/staging/6.12.0-rt5-rtforge")


@pytest.mark.parametrize("argv, message", [
    (["target", "info", "--", "-oProxyCommand=x"], "is not a host to connect to"),
    (["target", "info", "a;reboot"], "is not a host to connect to"),
    (["kernels", "nosuchhost.invalid"], "cannot reach nosuchhost.invalid"),
])
def test_bad_hosts(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
