# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)

DOCUMENTATION = r"""
module: deploy
short_description: Install a kernel on a board with rtforge, tried once, kept only if it proves itself
author: rtforge maintainers
description:
  - Runs C(rtforge deploy HOST BUNDLE) on the controller
    (its action plugin runs it there, whatever the host's connection). rtforge installs the kernel
    beside the old one, boots it once (tryboot or grub-reboot), checks that it is the expected PREEMPT_RT kernel
    and only then makes it the default; otherwise the board boots its previous kernel again.
  - A kernel that was not kept fails the task with outcome C(fell back), so a play with C(serial) and
    C(max_fail_percentage=0) stops before the next batch of boards.
  - When the task runs for the board it names (I(host) is its C(inventory_hostname)), an option the task
    leaves out is that host's variable named for it when defined (inventory, group_vars, a role's defaults),
    C(rtforge_<option>), or C(rtforge_command) for I(rtforge), C(rtforge_deploy_timeout) for I(timeout).
    C(module_defaults) for the module count as given.
extends_documentation_fragment: [rtforge.rtforge.command]
options:
  bundle:
    description:
      - A bundle from C(rtforge kernel build), or a linux-image .deb for a GRUB board.
      - Left out, the host's C(rtforge_bundle).
    type: path
  official:
    description:
      - Install Raspberry Pi's own RT kernel package instead of a bundle.
    type: bool
    default: false
  no_try:
    description:
      - The board's firmware has no tryboot; the kernel is installed with no automatic way back.
    type: bool
    default: false
  timeout:
    description:
      - How long to wait for the board to come back after each reboot, a duration such as C(90s) or C(5m).
      - Left out, the host's C(rtforge_deploy_timeout).
    type: str
    default: 5m
"""

EXAMPLES = r"""
- name: Install a kernel bundle on the board, a few boards at a time
  rtforge.rtforge.deploy:
    host: "{{ inventory_hostname }}"
    bundle: dist/6.12.0-rt5-rtforge-pi4-64
    timeout: 10m
  register: deployed
  failed_when: deployed.outcome not in ['ok', 'unreachable']

- name: Raspberry Pi's own RT kernel package instead
  rtforge.rtforge.deploy:
    host: "{{ inventory_hostname }}"
    official: true
"""

RETURN = r"""
outcome:
  description: What the board came to, one of C(ok), C(fell back), C(unreachable), C(refused), C(interrupted),
    C(failed).
  type: str
  returned: always
message:
  description: rtforge's last word, which says what the board boots now.
  type: str
  returned: always
steps:
  description: The steps rtforge went through.
  type: list
  elements: str
  returned: always
"""

from ansible_collections.rtforge.rtforge.plugins.module_utils import runner  # noqa: E402


ARGUMENT_SPEC = dict(
    runner.BOARD_SPEC, bundle=dict(type="path"),
    official=dict(type="bool", default=False), no_try=dict(type="bool", default=False),
    timeout=dict(type="str", default="5m"))

# The options a task leaves out: the host's variables of these names (plugin_utils/oncontroller.py says why).
FROM_VARS = dict(
    runner.BOARD_VARS, bundle="rtforge_bundle",
    official="rtforge_official", no_try="rtforge_no_try", timeout="rtforge_deploy_timeout")


def main():
    from ansible.module_utils.basic import AnsibleModule  # here: the action plugin imports this file without it
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False))


def run(module):
    p = module.params
    argv = runner.base_argv(p, "deploy", p["host"])
    if p["bundle"]:
        argv.insert(len(p["rtforge"]) + 2, p["bundle"])
    argv += ["--official"] if p["official"] else []
    argv += ["--no-try"] if p["no_try"] else []
    argv += ["--timeout", p["timeout"]]
    # rtforge bounds each wait itself (--timeout); no deadline of ours may cut a deploy between its steps
    f = runner.run(argv)
    result, message = runner.outcome(f, "deploy")
    lines = [ln.strip() for ln in f.out.splitlines() if ln.strip()]
    steps = [ln[2:] for ln in lines if ln.startswith("→ ")]
    last = next((ln for ln in reversed(lines) if ln.startswith(("done:", "not deployed:"))), "")
    word = last.split(":", 1)[1].strip() if last else message
    if result == runner.OK:
        module.exit_json(changed=True, outcome=result, message=word, steps=steps, seconds=round(f.seconds, 1))
    module.fail_json(msg=word or message, outcome=result, message=word or message, steps=steps, rc=f.rc,
                     seconds=round(f.seconds, 1), stderr_tail=f.err[-2000:])


if __name__ == "__main__":
    main()
