# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)

DOCUMENTATION = r"""
module: latency
short_description: Measure a board's wake-up latency with rtforge and store the run
author: rtforge maintainers
description:
  - Runs C(rtforge latency HOST --json) on the controller
    (its action plugin runs it there, whatever the host's connection); rtforge reaches the board
    over SSH with the ssh config the rtforge.rtforge.ssh_config module wrote, uploads its probe, measures and
    stores the run in the controller's run store, labelled with the board's inventory name.
  - A board that drops mid-run is waited for until I(patience) past the run's expected end; then rtforge lets go
    of the run, which goes on on the board, and the module fails with outcome C(lost) and the run's id.
    Called again with I(run) set to that id (or I(resume) true), it collects the run instead of measuring again.
  - When the task runs for the board it names (I(host) is its C(inventory_hostname)), an option the task
    leaves out is that host's variable named for it when defined (inventory, group_vars, a role's defaults),
    C(rtforge_<option>), or C(rtforge_command) for I(rtforge) (not I(run) or I(resume)).
    C(module_defaults) for the module count as given.
extends_documentation_fragment:
  - rtforge.rtforge.command
  - rtforge.rtforge.command.results_dir
  # the options of rtforge latency, made from rtforge's one declaration of them (data/latency_options.toml)
  - rtforge.rtforge.latency
options:
  label:
    description:
      - The run's label.
      - Left out of a task, the host's C(rtforge_label).
    type: str
  run:
    description:
      - A run of this board to collect (attach) instead of measuring.
    type: str
  resume:
    description:
      - First collect a run of this label started after I(since).
    type: bool
    default: false
  since:
    description:
      - An ISO 8601 UTC time; with I(resume), only the runs started after it are this one's.
      - Left out of a task, the host's C(rtforge_since).
    type: str
"""

EXAMPLES = r"""
- name: Measure each board for ten minutes under CPU and disk load
  rtforge.rtforge.latency:
    host: "{{ inventory_hostname }}"
    duration: 10m
    load: cpu,io
    label: "{{ inventory_hostname }} nightly"
  register: measured

- name: Say each board's worst wake-up
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }}: {{ measured.summary.max_ns }} ns at worst (run {{ measured.run_id }})"
  when: measured.outcome == 'ok'
"""

RETURN = r"""
outcome:
  description: What the board came to, one of C(ok), C(unreachable), C(lost), C(busy), C(refused), C(interrupted),
    C(failed).
  type: str
  returned: always
run_id:
  description: The stored run (C(ok)) or the run that goes on on the board (C(lost)).
  type: str
  returned: when known
how:
  description: How the run was had, C(measured), C(attached) or C(fetched).
  type: str
  returned: on success
summary:
  description: The run's figures (C(max_ns), C(p99_ns), C(state), C(partial), C(kernel_release), C(preempt_model)).
  type: dict
  returned: on success
"""

from ansible_collections.rtforge.rtforge.plugins.module_utils import latency_options, runner  # noqa: E402

FETCH_DEADLINE_S = 600.0    # a fetch copies a finished run; only a board that hangs takes longer
INSTALL_ALLOWANCE_S = 1800.0  # --install: apt-get on the board before the run starts


def expected_s(p):
    """How long the run should measure, from the options as given (None: unknown)."""
    default = latency_options.DEFAULTS
    if p["loops"]:
        return p["loops"] * (p["interval_us"] or default["interval_us"]) / 1e6
    d = runner.span_s(p["duration"] or default["duration"])
    if d is None:
        return None
    settle = p["settle_s"] if p["settle_s"] is not None else (
        float(latency_options.SETTLE_WITH_LOADS_S) if p["load"] else 0.0)
    return d + settle


def measure_argv(p):
    argv = runner.base_argv(p, "latency", p["host"]) + ["--json"]
    if p["label"]:
        argv += ["--label", p["label"]]
    for key, flag in latency_options.FLAGS.items():
        if p[key] is True:
            argv.append(flag)
        elif p[key] is not None and p[key] is not False and p[key] != "":
            argv += [flag, str(p[key])]
    return argv


def ours(shown, p):
    """A run fetched from the board is this measurement's when it carries its
    label and started after it (start times are the controller's clock)."""
    return (shown.get("label") == p["label"] and (not p["since"] or (shown.get("start_time") or "") >= p["since"]))


ARGUMENT_SPEC = dict(
    runner.BOARD_SPEC, results_dir=dict(type="path"), label=dict(type="str"), run=dict(type="str"),
    resume=dict(type="bool", default=False), since=dict(type="str"), **latency_options.ARGUMENT_SPEC)

# The options a task leaves out: the host's variables of these names (plugin_utils/oncontroller.py says why).
FROM_VARS = dict(runner.BOARD_VARS, results_dir="rtforge_results_dir", label="rtforge_label", since="rtforge_since",
                 **latency_options.FROM_VARS)


def main():
    from ansible.module_utils.basic import AnsibleModule  # here: the action plugin imports this file without it
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False))


def run(module):
    p = module.params
    patience = runner.span_s(p["patience"])
    if patience is None:
        module.fail_json(msg="patience %r is not a duration such as 90s or 5m" % p["patience"], outcome=runner.REFUSED)
    expected = expected_s(p)
    # patience covers the start (connect, upload, the runner) and a board that drops and comes back
    deadline = None if expected is None else expected + patience + (INSTALL_ALLOWANCE_S if p["install"] else 0)

    def finish(f, how):
        result, message = runner.outcome(f, "latency")
        shown = f.json() if result == runner.OK else None
        summary = runner.run_summary(shown)
        run_id = summary.get("run_id") or runner.let_go_run(f) or runner.busy_run(f)
        if result == runner.OK:
            module.exit_json(changed=True, outcome=result, how=how, run_id=run_id, summary=summary,
                             seconds=round(f.seconds, 1))
        module.fail_json(msg=message, outcome=result, run_id=run_id, rc=f.rc, how=how,
                         seconds=round(f.seconds, 1), stderr_tail=f.err[-2000:])

    if p["run"]:  # a run this measurement started before: follow it to its end, or collect it
        argv = runner.base_argv(p, "attach", p["host"])
        argv.insert(len(p["rtforge"]) + 2, p["run"])
        finish(runner.run(argv + ["--json"], deadline_s=deadline), "attached")
    if p["resume"]:  # started before, id unknown (the controller was killed): collect what ended
        f = runner.run(runner.base_argv(p, "fetch", p["host"]) + ["--json"], deadline_s=FETCH_DEADLINE_S)
        result, message = runner.outcome(f, "fetch")
        if result == runner.OK:
            mine = [s for s in (f.json() or []) if ours(s, p)]
            if mine:
                summary = runner.run_summary(mine[-1])
                module.exit_json(changed=True, outcome=runner.OK, how="fetched", run_id=summary["run_id"],
                                 summary=summary, seconds=round(f.seconds, 1))
            going = [r for r in runner.still_running(f) if runner.started_after(r, p["since"])]
            if going:  # the board measures still, and began after this measurement did: it is this one
                argv = runner.base_argv(p, "attach", p["host"])
                argv.insert(len(p["rtforge"]) + 2, going[0])
                finish(runner.run(argv + ["--json"], deadline_s=deadline), "attached")
        elif result == runner.UNREACHABLE:
            module.fail_json(msg=message, outcome=result, rc=f.rc, how="fetched", stderr_tail=f.err[-2000:])
    finish(runner.run(measure_argv(p), deadline_s=deadline), "measured")


if __name__ == "__main__":
    main()
