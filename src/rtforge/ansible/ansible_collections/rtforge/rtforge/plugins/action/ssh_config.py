# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)
"""rtforge.rtforge.ssh_config runs in Ansible's worker on the controller (plugin_utils/oncontroller.py says why)."""

from ansible_collections.rtforge.rtforge.plugins.modules import ssh_config
from ansible_collections.rtforge.rtforge.plugins.plugin_utils.oncontroller import ModuleOnController


class ActionModule(ModuleOnController):
    MODULE = ssh_config
