# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)

DOCUMENTATION = r"""
module: ssh_config
short_description: Write the ssh config rtforge reaches the inventory's boards with
author: rtforge maintainers
description:
  - One C(Host) per inventory host (its inventory name is the alias), from its connection variables; the
    user's own ssh configs are included after them for everything the inventory does not say.
  - Refuses, naming the host and the variable, what ssh could not be given through a config file (a password,
    another connection plugin, a command-line option with no config keyword). Written atomically, mode 0600.
options:
  path:
    description:
      - The file to write.
    type: path
    required: true
  hosts:
    description:
      - One dict per host, with the keys C(name), C(host), C(port), C(user), C(key), C(connection),
        C(password) (a bool), C(common_args) and C(extra_args).
      - The role rtforge.rtforge.ssh_config makes them from each host's C(ansible_host), C(ansible_port),
        C(ansible_user), C(ansible_ssh_private_key_file), C(ansible_connection), C(ansible_password),
        C(ansible_ssh_common_args) and C(ansible_ssh_extra_args).
    type: list
    elements: dict
    required: true
  includes:
    description:
      - The ssh configs read after the boards' own lines, since C(ssh -F) skips the usual ones.
    type: list
    elements: str
    default: [~/.ssh/config, /etc/ssh/ssh_config]
"""

EXAMPLES = r"""
- name: Write the ssh config of two boards, run once on the controller
  rtforge.rtforge.ssh_config:
    path: /home/lab/.cache/rtforge/lab.ssh_config
    hosts:
      - {name: pi-01, host: 10.0.0.11, user: pi, key: ~/.ssh/lab}
      - {name: pi-02, host: 10.0.0.12, port: "2222", user: pi, common_args: "-o ProxyJump=gw.lab"}
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: The file written.
  type: str
  returned: always
hosts:
  description: How many C(Host) blocks it holds.
  type: int
  returned: always
"""

import os  # noqa: E402
import tempfile  # noqa: E402

from ansible_collections.rtforge.rtforge.plugins.module_utils import sshconfig  # noqa: E402


ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True), hosts=dict(type="list", elements="dict", required=True),
    includes=dict(type="list", elements="str", default=["~/.ssh/config", "/etc/ssh/ssh_config"]))


def main():
    from ansible.module_utils.basic import AnsibleModule  # here: the action plugin imports this file without it
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False))


def run(module):
    p = module.params
    try:
        text = sshconfig.render(p["hosts"], p["includes"])
    except sshconfig.Refused as e:
        module.fail_json(msg=str(e), outcome="refused")
    path = p["path"]
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if old == text:
        module.exit_json(changed=False, path=path, hosts=len(p["hosts"]))
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".ssh_config.")
    try:
        with os.fdopen(fd, "w") as f:   # mkstemp's 0600: ssh refuses a config others may write
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    module.exit_json(changed=True, path=path, hosts=len(p["hosts"]))


if __name__ == "__main__":
    main()
