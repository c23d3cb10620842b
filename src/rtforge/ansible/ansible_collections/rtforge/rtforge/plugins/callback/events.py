# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)

DOCUMENTATION = r"""
name: events
type: stdout
short_description: One JSON object per line for each host's task start and result (what rtforge fleet reads)
description:
  - Writes on standard output, one line each, what happens to every host, that is a task starting, its result
    (ok, failed, skipped, unreachable, with the module's return values), a retry, and the play's closing stats.
  - C(rtforge fleet) runs the collection's playbooks with this callback and draws its per-board progress and
    summary from these lines; Ansible's own warnings and errors still go to standard error.
  - Unless the configuration sets C(internal_poll_interval) (ansible.cfg, C([defaults])), the play's main process
    looks for its workers' results every 0.05 s instead of Ansible's 0.001 s.
"""

import gc  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from ansible import constants as C  # noqa: E402
from ansible.plugins.callback import CallbackBase  # noqa: E402

# Module return values never worth a line: the arguments echoed back, and Ansible's bookkeeping.
DROPPED = ("invocation", "_ansible_no_log", "_ansible_verbose_always", "_ansible_verbose_override",
           "_ansible_delegated_vars")

# Ansible's main process waits for its workers' results by polling, every internal_poll_interval: 0.001 s
# unless configured, which costs ~8 % of a CPU for as long as the play runs (measured: 0.7 s of CPU per
# 10 s of waiting) -- on a small controller, CPU taken from the boards being started, and ~25 min of
# CPU over a 5.5-hour soak.  rtforge's tasks last seconds to hours: a result seen 50 ms later changes
# nothing.  The setting has no environment variable, and the user's ansible.cfg is theirs: so the
# callback rtforge fleet always uses sets it, in the main process (where it loads), when nothing did.
POLL_S = 0.05


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "rtforge.rtforge.events"

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        try:
            _, origin = C.config.get_config_value_and_origin("DEFAULT_INTERNAL_POLL_INTERVAL")
        except Exception:   # another ansible-core's configuration API: its own default stands
            return
        if origin == "default":
            C.DEFAULT_INTERNAL_POLL_INTERVAL = POLL_S

    def _emit(self, event, **fields):
        fields["event"] = event
        fields["t"] = round(time.time(), 3)
        # default=str: a module may return something json cannot say (bytes, a set); one line stays one line
        sys.stdout.write(json.dumps(fields, default=str, sort_keys=True) + "\n")
        sys.stdout.flush()

    def _result(self, event, result, **extra):
        values = {k: v for k, v in (result._result or {}).items() if k not in DROPPED}
        self._emit(event, host=result._host.get_name(), task=result._task.get_name(), action=result._task.action,
                   result=values, **extra)

    def v2_playbook_on_play_start(self, play):
        self._emit("play", name=play.get_name())
        # Ansible forks a worker from this process for every host and task.  What this process holds by
        # now (Ansible's modules, the inventory, the play) outlives every worker: frozen, it is out of the
        # collector's sight, so a worker's collections do not write to (and so copy, page by page) the
        # objects it shares with this process.  Measured: the latency play on 24 hosts (rtforge_command
        # /bin/true), 1.14 -> 1.10 s of CPU in all, ~2 ms per host (means of six runs each; medians 1.11 -> 1.10).
        gc.freeze()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._emit("task", name=task.get_name(), action=task.action)

    def v2_runner_on_start(self, host, task):
        self._emit("start", host=host.get_name(), task=task.get_name(), action=task.action)

    def v2_runner_on_ok(self, result):
        self._result("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("failed", result, ignored=bool(ignore_errors))

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable", result)

    def v2_runner_on_skipped(self, result):
        self._result("skipped", result)

    def v2_runner_retry(self, result):
        r = result._result or {}
        self._emit("retry", host=result._host.get_name(), task=result._task.get_name(), action=result._task.action,
                   attempt=r.get("attempts"), retries=r.get("retries"),
                   result={k: v for k, v in r.items() if k in ("outcome", "msg", "run_id")})

    def v2_playbook_on_no_hosts_matched(self):
        self._emit("no_hosts")

    def v2_playbook_on_no_hosts_remaining(self):
        self._emit("no_hosts_remaining")

    def v2_playbook_on_stats(self, stats):
        hosts = sorted(stats.processed.keys())
        self._emit("stats", hosts={h: stats.summarize(h) for h in hosts})
