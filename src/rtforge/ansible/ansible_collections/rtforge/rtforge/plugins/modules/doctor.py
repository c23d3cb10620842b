# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)

DOCUMENTATION = r"""
module: doctor
short_description: What hurts latency on a board, with rtforge doctor
author: rtforge maintainers
description:
  - Runs C(rtforge doctor HOST --json) on the controller
    (its action plugin runs it there, whatever the host's connection) and returns its report.
    It is a report, so the task succeeds whatever doctor finds and fails only when the board cannot be
    examined.
  - When the task runs for the board it names (I(host) is its C(inventory_hostname)), an option the task
    leaves out is that host's variable named for it when defined (inventory, group_vars, a role's defaults),
    C(rtforge_<option>), or C(rtforge_command) for I(rtforge).
    C(module_defaults) for the module count as given.
extends_documentation_fragment: [rtforge.rtforge.command]
options:
  window_s:
    description:
      - Seconds over which the threads' CPU use is measured.
      - Left out, the host's C(rtforge_window_s).
    type: float
  isolate:
    description:
      - The CPUs meant for real-time work, such as C(3) or C(2-3).
      - Left out, the host's C(rtforge_isolate).
    type: str
"""

EXAMPLES = r"""
- name: What hurts latency on the board, for CPU 3 kept for real-time work
  rtforge.rtforge.doctor:
    host: "{{ inventory_hostname }}"
    isolate: "3"
  register: doctor

- name: Say how many findings block real-time use
  ansible.builtin.debug:
    msg: "{{ doctor.counts['blocks-rt'] | default(0) }} findings block RT"
"""

RETURN = r"""
outcome:
  description: What the board came to, one of C(ok), C(unreachable), C(refused), C(interrupted), C(failed).
  type: str
  returned: always
counts:
  description: The number of findings per severity (C(blocks-rt), C(costs-latency), C(note)).
  type: dict
  returned: on success
report:
  description: The report of C(rtforge doctor --json).
  type: dict
  returned: on success
"""

from ansible_collections.rtforge.rtforge.plugins.module_utils import runner  # noqa: E402

DEADLINE_S = 600.0   # doctor reads a board for seconds; a board that hangs it must not hold the play for ever


ARGUMENT_SPEC = dict(runner.BOARD_SPEC, window_s=dict(type="float"), isolate=dict(type="str"))

# The options a task leaves out: the host's variables of these names (plugin_utils/oncontroller.py says why).
FROM_VARS = dict(runner.BOARD_VARS, window_s="rtforge_window_s", isolate="rtforge_isolate")


def main():
    from ansible.module_utils.basic import AnsibleModule  # here: the action plugin imports this file without it
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False))


def run(module):
    p = module.params
    argv = runner.base_argv(p, "doctor", p["host"]) + ["--json"]
    argv += ["--window-s", str(p["window_s"])] if p["window_s"] is not None else []
    argv += ["--isolate", p["isolate"]] if p["isolate"] else []
    f = runner.run(argv, deadline_s=DEADLINE_S)
    result, message = runner.outcome(f, "doctor")
    report = f.json() if result == runner.OK else None
    if result == runner.OK and isinstance(report, dict):
        counts = {}
        for finding in report.get("findings") or []:
            counts[finding.get("severity")] = counts.get(finding.get("severity"), 0) + 1
        module.exit_json(changed=False, outcome=result, counts=counts, report=report, seconds=round(f.seconds, 1))
    module.fail_json(msg=message or "doctor printed no report", outcome=result if result != runner.OK else
                     runner.FAILED, rc=f.rc, seconds=round(f.seconds, 1), stderr_tail=f.err[-2000:])


if __name__ == "__main__":
    main()
