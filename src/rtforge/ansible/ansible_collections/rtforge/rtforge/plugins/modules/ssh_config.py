# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)

DOCUMENTATION = r"""
module: ssh_config
short_description: Write the ssh config rtforge reaches the inventory's boards with
description:
  - One C(Host) per inventory host (its inventory name is the alias), from its connection variables; the
    user's own ssh configs are included after them for everything the inventory does not say.
  - Refuses, naming the host and the variable, what ssh could not be given through a config file (a password,
    another connection plugin, a command-line option with no config keyword). Written atomically, mode 0600.
options:
  path: {description: the file to write, required: true, type: path}
  hosts:
    description: one dict per host, with name, host, port, user, key, connection, password (bool), common_args,
      extra_args
    type: list
    elements: dict
    required: true
  includes:
    description: ssh configs read after the boards' own lines (ssh -F skips the usual ones)
    type: list
    elements: str
    default: [~/.ssh/config, /etc/ssh/ssh_config]
"""

RETURN = r"""
path: {description: the file written, type: str, returned: always}
hosts: {description: how many Host blocks it holds, type: int, returned: always}
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
