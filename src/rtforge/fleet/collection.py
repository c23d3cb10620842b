"""The collection's files made from the one declaration of the latency
options (data/latency_options.toml, measure/options.py).

The collection cannot read that declaration when it runs: its modules run
under Ansible's Python, which need not have rtforge, and ansible-doc reads
a module's documentation as YAML text.  So the declaration is written into
the collection as plain files:

    plugins/doc_fragments/latency.py          the options' documentation (extends_documentation_fragment)
    plugins/module_utils/latency_options.py   what the module takes: argument spec, host variables, flags
    roles/latency/meta/argument_specs.yml     the role's variables, between two markers (the rest by hand)

`make collection` (python -m rtforge.fleet.collection) writes them;
tests/unit/fleet/test_collection_made.py fails while one differs from what
this makes, so the declaration and the collection cannot drift apart.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from .. import paths
from ..measure.options import OPTIONS, Option
from ..measure.spec import DEFAULT_SETTLE_S
from .playbook import COLLECTIONS

ROOT = COLLECTIONS / "ansible_collections" / "rtforge" / "rtforge"
HEADER = ("# -*- coding: utf-8 -*-\n# GPL-2.0-or-later (rtforge)\n"
          "# Made by `make collection` from rtforge's src/rtforge/data/latency_options.toml: edit that file,\n"
          "# then make this one again (a test fails while they differ).\n")


def ansible_default(o: Option):
    """The module's own default: a flag is off; patience is the module's; any other option it leaves
    unset, so that rtforge applies its own default (and says so in the run's reproducer)."""
    if o.type == "bool":
        return bool(o.default)
    return o.default if not o.command else None


def argument_spec(o: Option) -> dict:
    spec: dict = {"type": o.type}
    if ansible_default(o) is not None:
        spec["default"] = ansible_default(o)
    return spec


def description(o: Option) -> list[str]:
    """The option in ansible-doc: what it is, what rtforge does without it, where else it comes from."""
    text = o.text()
    out = [text[0].upper() + text[1:] + "."]
    if o.command and o.unset:
        out.append(f"Not given, rtforge's default: {f'C({o.default})' if o.default is not None else o.unset}.")
    where = f"the host's C({o.variable})"
    out.append(f"Passed to C(rtforge latency) as C({o.flag}); left out of a task, {where}." if o.command
               else f"Left out of a task, {where}.")
    return out


def _yaml(value) -> str:
    """A scalar as YAML reads it back: JSON's strings are YAML's double-quoted ones."""
    return json.dumps(value, ensure_ascii=False)


def _item(text: str, indent: int) -> list[str]:
    """A list item of YAML, wrapped to the line length (YAML folds a quoted string's line breaks into spaces)."""
    return textwrap.wrap(_yaml(text), 118 - indent, initial_indent=" " * indent + "- ",
                         subsequent_indent=" " * (indent + 2), break_long_words=False, break_on_hyphens=False)


def _options(names: list[tuple[str, Option]], describe, default, indent: int) -> list[str]:
    """Options in the YAML of Ansible's documentation (a module's, a role's argument spec)."""
    pad, lines = " " * indent, []
    for name, o in names:
        lines += [f"{pad}{name}:", f"{pad}  description:"]
        lines += [line for s in describe(o) for line in _item(s, indent + 4)]
        lines += [f"{pad}  type: {o.type}"]
        if default(o) is not None:
            lines += [f"{pad}  default: {_yaml(default(o))}"]
    return lines


def doc_fragment() -> str:
    lines = _options([(o.name, o) for o in OPTIONS.values()], description, ansible_default, 2)
    return (HEADER + '"""The options of rtforge latency that the rtforge.rtforge.latency module passes on, and its\n'
            'own patience: extends_documentation_fragment: rtforge.rtforge.latency."""\n\n\n'
            'class ModuleDocFragment(object):\n\n    DOCUMENTATION = r"""\noptions:\n' + "\n".join(lines) + '\n"""\n')


def _dict(pairs: list[tuple[str, object]]) -> str:
    return "{\n" + "".join(f"    {name!r}: {value!r},\n" for name, value in pairs) + "}\n"


def module_utils() -> str:
    opts = list(OPTIONS.values())
    return (HEADER + '"""The options of rtforge latency as the latency module takes them (its own patience too)."""\n\n'
            "# option -> its argument spec\n"
            "ARGUMENT_SPEC = " + _dict([(o.name, argument_spec(o)) for o in opts]) +
            "\n# option -> the host variable that gives it when a task leaves it out\n"
            "FROM_VARS = " + _dict([(o.name, o.variable) for o in opts]) +
            "\n# option -> the flag of rtforge latency it is passed with (a bool: the flag alone, when true)\n"
            "FLAGS = " + _dict([(o.name, o.flag) for o in opts if o.command]) +
            "\n# rtforge's own defaults (the module's deadline counts with duration and interval_us)\n"
            "DEFAULTS = " + _dict([(o.name, o.default) for o in opts if o.command and o.type != "bool"
                                   and o.default is not None]) +
            f"SETTLE_WITH_LOADS_S = {DEFAULT_SETTLE_S!r}   # settle_s when loads run and it is not given\n")


ROLE_SPEC = ROOT / "roles" / "latency" / "meta" / "argument_specs.yml"
BEGIN = "      # ---- made by `make collection` from rtforge's src/rtforge/data/latency_options.toml: edit that ----\n"
END = "      # ---- end of what `make collection` makes ----\n"


def role_description(o: Option) -> list[str]:
    given = f", given to C(rtforge latency) as C({o.flag})" if o.command else ""
    return description(o)[:-1] + [f"The option I({o.name}) of M(rtforge.rtforge.latency){given}."]


def role_default(o: Option):
    """The role's own defaults (defaults/main.yml) are the module's own options only: patience."""
    return None if o.command or o.type == "bool" else o.default


def role_spec(text: str) -> str:
    """The latency role's argument_specs.yml with the declared options' variables between its two markers
    (the role's own variables are written there by hand)."""
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    lines = _options([(o.variable, o) for o in OPTIONS.values()], role_description, role_default, 6)
    return head + BEGIN + "".join(line + "\n" for line in lines) + END + tail


def made() -> dict[Path, str]:
    """Each file of the collection this makes -> its text."""
    return {ROOT / "plugins" / "doc_fragments" / "latency.py": doc_fragment(),
            ROOT / "plugins" / "module_utils" / "latency_options.py": module_utils(),
            ROLE_SPEC: role_spec(ROLE_SPEC.read_text())}


def differing() -> list[Path]:
    return [path for path, text in made().items() if not path.exists() or path.read_text() != text]


def main(argv: list[str]) -> int:
    """Write the files that differ (--check: only name them, exit 1 if any does)."""
    stale = differing()
    for path in stale:
        if "--check" not in argv:
            paths.write_atomic(path, made()[path])
        print(f"{'differs' if '--check' in argv else 'wrote'}: {path.relative_to(ROOT)}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
