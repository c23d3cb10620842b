# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)
"""rtforge.rtforge.fetch runs in Ansible's worker on the controller (plugin_utils/oncontroller.py says why)."""

from ansible_collections.rtforge.rtforge.plugins.modules import fetch
from ansible_collections.rtforge.rtforge.plugins.plugin_utils.oncontroller import ModuleOnController


class ActionModule(ModuleOnController):
    MODULE = fetch
