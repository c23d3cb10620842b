# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)

DOCUMENTATION = r"""
module: fetch
short_description: Bring the runs that ended on a board into the controller's run store
author: rtforge maintainers
description:
  - Runs C(rtforge fetch HOST --json) on the controller
    (its action plugin runs it there, whatever the host's connection). Every finished or partial run
    is copied into the store, checked against the board's sha256, and only then removed from the board.
    Runs still measuring stay there and are named.
  - When the task runs for the board it names (I(host) is its C(inventory_hostname)), an option the task
    leaves out is that host's variable named for it when defined (inventory, group_vars, a role's defaults),
    C(rtforge_<option>), or C(rtforge_command) for I(rtforge).
    C(module_defaults) for the module count as given.
extends_documentation_fragment: [rtforge.rtforge.command, rtforge.rtforge.command.results_dir]
options: {}
"""

EXAMPLES = r"""
- name: Bring the board's finished runs into a store of the lab's own
  rtforge.rtforge.fetch:
    host: "{{ inventory_hostname }}"
    results_dir: /srv/rtforge/runs
  register: fetched
"""

RETURN = r"""
outcome:
  description: What the board came to, one of C(ok), C(unreachable), C(refused), C(interrupted), C(failed).
  type: str
  returned: always
runs:
  description: The figures of each run fetched.
  type: list
  elements: dict
  returned: on success
running:
  description: The ids of the runs still measuring on the board.
  type: list
  elements: str
  returned: on success
"""

from ansible_collections.rtforge.rtforge.plugins.module_utils import runner  # noqa: E402

DEADLINE_S = 3600.0   # a fetch copies files of any size; only a board that hangs is cut


ARGUMENT_SPEC = dict(runner.BOARD_SPEC, results_dir=dict(type="path"))

# The options a task leaves out: the host's variables of these names (plugin_utils/oncontroller.py says why).
FROM_VARS = dict(runner.BOARD_VARS, results_dir="rtforge_results_dir")


def main():
    from ansible.module_utils.basic import AnsibleModule  # here: the action plugin imports this file without it
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False))


def run(module):
    p = module.params
    f = runner.run(runner.base_argv(p, "fetch", p["host"]) + ["--json"], deadline_s=DEADLINE_S)
    result, message = runner.outcome(f, "fetch")
    if result == runner.OK:
        runs = [runner.run_summary(s) for s in (f.json() or [])]
        module.exit_json(changed=bool(runs), outcome=result, runs=runs, running=runner.still_running(f),
                         seconds=round(f.seconds, 1))
    module.fail_json(msg=message, outcome=result, rc=f.rc, seconds=round(f.seconds, 1), stderr_tail=f.err[-2000:])


if __name__ == "__main__":
    main()
