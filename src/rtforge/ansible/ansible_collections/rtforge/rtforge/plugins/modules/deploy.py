# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)

DOCUMENTATION = r"""
module: deploy
short_description: Install a kernel on a board with rtforge, tried once, kept only if it proves itself
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
options:
  host: {description: the board's Host alias in I(ssh_config), required: true, type: str}
  ssh_config: {description: ssh config file rtforge connects with, type: path}
  rtforge: {description: the rtforge command, as a list, type: list, elements: str, default: [rtforge]}
  bundle: {description: a bundle from rtforge kernel build, or a linux-image .deb for a GRUB board, type: path}
  official: {description: "install Raspberry Pi's own RT kernel package instead", type: bool, default: false}
  no_try: {description: firmware without tryboot (no automatic way back), type: bool, default: false}
  timeout: {description: how long to wait for the board to come back, e.g. 5m, type: str, default: 5m}
"""

RETURN = r"""
outcome: {description: "ok, fell back, unreachable, refused, interrupted or failed", type: str, returned: always}
message: {description: "rtforge's last word: what the board boots now", type: str, returned: always}
steps: {description: the steps rtforge went through, type: list, returned: always}
"""

from ansible_collections.rtforge.rtforge.plugins.module_utils import runner  # noqa: E402


ARGUMENT_SPEC = dict(
    host=dict(type="str", required=True), ssh_config=dict(type="path"),
    rtforge=dict(type="list", elements="str", default=["rtforge"]), bundle=dict(type="path"),
    official=dict(type="bool", default=False), no_try=dict(type="bool", default=False),
    timeout=dict(type="str", default="5m"))

# The options a task leaves out: the host's variables of these names (plugin_utils/oncontroller.py says why).
FROM_VARS = dict(
    ssh_config="rtforge_ssh_config", rtforge="rtforge_command", bundle="rtforge_bundle",
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
