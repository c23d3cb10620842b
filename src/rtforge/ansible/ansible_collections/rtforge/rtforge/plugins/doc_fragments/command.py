# -*- coding: utf-8 -*-
# GPL-2.0-or-later (rtforge)
"""The options of every module that runs an rtforge command for one board
(deploy, doctor, fetch, latency), documented once here and taken once by
module_utils/runner.py's BOARD_SPEC and BOARD_VARS; tests/integration/
test_collection.py holds the two equal through ansible-doc."""


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  host:
    description:
      - The board, as the C(Host) alias of I(ssh_config) that its inventory name is.
    type: str
    required: true
  ssh_config:
    description:
      - The ssh config file rtforge connects with (C(ssh -F)), as the M(rtforge.rtforge.ssh_config) module
        writes it.
      - Left out, the host's C(rtforge_ssh_config).
    type: path
  rtforge:
    description:
      - The rtforge command on the controller, as a list of words.
      - Left out, the host's C(rtforge_command).
    type: list
    elements: str
    default: [rtforge]
"""

    # extends_documentation_fragment: rtforge.rtforge.command.results_dir (the modules that store runs)
    RESULTS_DIR = r"""
options:
  results_dir:
    description:
      - The run store on the controller (C(--results-dir)); unset, rtforge's own.
      - Left out, the host's C(rtforge_results_dir).
    type: path
"""
