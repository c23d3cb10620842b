# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)
"""A module of this collection run by its action plugin, on the controller.

Every module here works on the controller (it runs the rtforge command,
which reaches the board itself): run as a module, each would cost a
Python interpreter per host and task (AnsiballZ: unpacking, compiling
AnsibleModule's sources, ~0.2 s of CPU) plus Ansible's temporary-folder
commands, before rtforge even starts -- on a controller that starts 32
boards at once, seconds of CPU ahead of every board's run.  So each module
has an action plugin of the same name that runs the module's own run()
in Ansible's worker, which is already a Python with Ansible loaded: the
arguments are checked against the module's ARGUMENT_SPEC by Ansible's own
validator, and exit_json/fail_json become the task's result.  The module
files keep the documentation and run() (and still run as modules, where
an action plugin is not used).

The options a task leaves out are the host's variables named in the
module's FROM_VARS (rtforge_duration for duration, ...), templated here,
when the task runs for the board it names (host is inventory_hostname):
the roles' tasks name a few options, not each as "{{ rtforge_x |
default(omit) }}", an expression Ansible compiles anew in every host's
worker (measured: ~40 ms of CPU per host for latency's twenty).
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

try:   # what Templar makes of a template's one output, e.g. "[1, 2]" a list (ansible-core 2.13 to 2.18)
    from ansible.template.native_helpers import ansible_eval_concat, ansible_native_concat
    _AS_RENDERED = {False: ansible_eval_concat, True: ansible_native_concat}
except ImportError:   # another ansible-core: every string variable goes through "{{ name }}"
    _AS_RENDERED = {}


class _Ended(Exception):
    def __init__(self, result):
        super().__init__(result.get("msg", ""))
        self.result = result


class _Module(object):
    """What the modules use of AnsibleModule: params, exit_json, fail_json."""

    def __init__(self, params):
        self.params = params

    def exit_json(self, **result):
        result["failed"] = False
        raise _Ended(result)

    def fail_json(self, msg, **result):
        result.update(failed=True, msg=msg)
        raise _Ended(result)


class ModuleOnController(ActionBase):
    """Subclasses name the module: MODULE, its file imported (ARGUMENT_SPEC, FROM_VARS, run(module))."""

    MODULE = None

    def _from_var(self, name, value):
        """A host's variable as the task's "{{ name }}" would have it: a string rendered, and made a list, a
        dict or a bool when it reads as one (an INI inventory's [group:vars] are all strings).  A string
        with nothing to render gets that last step alone: compiling "{{ name }}" is a Jinja template made
        anew in every host's worker (measured: ~2 ms of CPU per host for six such variables)."""
        if not isinstance(value, str):
            return self._templar.template(value)
        concat = _AS_RENDERED.get(getattr(self._templar, "jinja2_native", None))
        if concat is not None and not self._templar.is_possibly_template(value):
            return concat([value])
        return self._templar.template("{{ %s }}" % name)

    def run(self, tmp=None, task_vars=None):
        result = super(ModuleOnController, self).run(tmp, task_vars)
        if self._play_context.check_mode:
            result.update(skipped=True, msg="check mode: rtforge measures and deploys for real, or not at all")
            return result
        args, task_vars = self._task.args, task_vars or {}
        # only for the board the task runs for: a play on localhost looping over boards (host: "{{ item }}")
        # would otherwise give each board localhost's variables
        mine = args.get("host") == task_vars.get("inventory_hostname")
        for option, name in getattr(self.MODULE, "FROM_VARS", {}).items() if mine else ():
            if option not in args and name in task_vars:
                args[option] = self._from_var(name, task_vars[name])
        try:
            _, params = self.validate_argument_spec(argument_spec=self.MODULE.ARGUMENT_SPEC)
        except AnsibleActionFail as e:
            result.update(failed=True, msg=str(e), outcome="refused")
            return result
        try:
            self.MODULE.run(_Module(params))
            result.update(failed=True, msg="the module ended without a result")   # run() always ends with one
        except _Ended as e:
            result.update(e.result)
        return result
