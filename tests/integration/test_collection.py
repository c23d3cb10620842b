"""The collection as Ansible's own tools read it (Debian's ansible-doc,
ansible-galaxy and ansible-playbook, and the Python they run under): every
module's documentation in Ansible's keys, each option whole and equal to
what the module takes, with examples that parse and an author; a built
artifact that carries its README and licence; every role's variables
declared and checked by Ansible; and each latency option, declared once,
the same in every part that offers it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import typer

from rtforge.cli import fleet as fleet_cli
from rtforge.cli import latency as latency_cli
from rtforge.fleet import settings
from rtforge.fleet.playbook import COLLECTIONS
from rtforge.measure import spec as run_spec
from rtforge.measure.options import OPTIONS

COLLECTION = COLLECTIONS / "ansible_collections" / "rtforge" / "rtforge"
MODULES = sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py"))
ROLES = sorted(p.name for p in (COLLECTION / "roles").iterdir())
ENV = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1"}

# The keys of Ansible's documentation format (ansible-doc adds collection, filename and has_action).
DOC_KEYS = {"module", "short_description", "description", "options", "author", "notes", "requirements", "seealso",
            "attributes", "version_added", "deprecated", "collection", "filename", "has_action"}
OPTION_KEYS = {"description", "type", "required", "default", "elements", "choices", "aliases", "suboptions",
               "version_added"}
RETURN_KEYS = {"description", "returned", "type", "elements", "sample", "contains", "version_added"}

# Under the Python Ansible runs (its modules' own), what each module takes (its ARGUMENT_SPEC, its FROM_VARS)
# and its EXAMPLES read as YAML; for latency, what it passes on to rtforge.
SPECS = """
import importlib, json, sys
import yaml
sys.path.insert(0, sys.argv[1])
out = {}
for name in sys.argv[2:]:
    m = importlib.import_module("ansible_collections.rtforge.rtforge.plugins.modules." + name)
    examples = yaml.safe_load(getattr(m, "EXAMPLES", None) or "null")
    out[name] = {"spec": m.ARGUMENT_SPEC, "from_vars": getattr(m, "FROM_VARS", {}), "examples": examples}
    if name == "latency":
        # its command line with every option given, and how long it expects a run to take
        sample = {"str": "x", "int": 1, "float": 1.5, "bool": True}
        p = {k: sample.get(s["type"]) for k, s in m.ARGUMENT_SPEC.items()}
        p.update(host="pi-01", rtforge=["rtforge"], label=None)
        none = {k: None for k in m.ARGUMENT_SPEC}
        out[name]["argv"] = m.measure_argv(p)
        out[name]["expected"] = [m.expected_s(none), m.expected_s(dict(none, duration="10s", load="cpu"))]
print(json.dumps(out))
"""


# The roles' defaults/main.yml, as Ansible's YAML reads them.
DEFAULTS = """
import json, sys, yaml
path = sys.argv[1] + "/roles/%s/defaults/main.yml"
print(json.dumps({r: yaml.safe_load(open(path % r)) or {} for r in sys.argv[2:]}))
"""


def ansible_python() -> str:
    """The interpreter of Debian's ansible-doc (its #! line): the Python the collection runs under."""
    line = Path(shutil.which("ansible-doc")).read_text().splitlines()[0]
    return line[2:].strip().split()[0]


@pytest.fixture(scope="module")
def docs() -> dict:
    p = subprocess.run(["ansible-doc", "--json", *[f"rtforge.rtforge.{m}" for m in MODULES]], capture_output=True,
                       text=True, env=ENV, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    return {name.rsplit(".", 1)[1]: doc for name, doc in json.loads(p.stdout).items()}


@pytest.fixture(scope="module")
def specs() -> dict:
    p = subprocess.run([ansible_python(), "-c", SPECS, str(COLLECTIONS), *MODULES], capture_output=True, text=True,
                       timeout=60, check=True)
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def roles() -> dict:
    p = subprocess.run(["ansible-doc", "-t", "role", "--json", *[f"rtforge.rtforge.{r}" for r in ROLES]],
                       capture_output=True, text=True, env=ENV, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    return {name.rsplit(".", 1)[1]: doc["entry_points"]["main"] for name, doc in json.loads(p.stdout).items()}


def sentences(description) -> list[str]:
    return description if isinstance(description, list) else [description]


def test_every_module_is_documented_in_ansibles_own_keys(docs):
    assert sorted(docs) == MODULES == ["deploy", "doctor", "fetch", "latency", "ssh_config"]
    for name, d in docs.items():
        doc = d["doc"]
        assert set(doc) <= DOC_KEYS, (name, set(doc) - DOC_KEYS)
        assert doc["module"] == name and doc["short_description"] and doc.get("author"), name
        for key, value in (d["return"] or {}).items():
            assert set(value) <= RETURN_KEYS, (name, key, set(value) - RETURN_KEYS)
            assert all(s.endswith(".") for s in sentences(value["description"])), (name, key)


def test_every_option_is_whole_and_is_what_the_module_takes(docs, specs):
    """An option's description cut at a comma leaves a key that is no option's (inline YAML: `e.g. 0-3: null`)
    and a fragment of a sentence; each is a whole sentence, and the documented options are the module's own
    ARGUMENT_SPEC, type, default and all."""
    for name, d in docs.items():
        options, spec = d["doc"]["options"], specs[name]["spec"]
        assert sorted(options) == sorted(spec), name
        for key, doc in options.items():
            assert set(doc) <= OPTION_KEYS, (name, key, set(doc) - OPTION_KEYS)
            assert all(s.endswith(".") for s in sentences(doc["description"])), (name, key, doc["description"])
            for field, default in (("type", "str"), ("required", False), ("default", None), ("elements", None)):
                assert doc.get(field, default) == spec[key].get(field, default), (name, key, field)


def test_every_module_has_examples_that_ansible_playbook_reads(docs, specs, tmp_path):
    """The examples are tasks of the module with its own options, in a play ansible-playbook accepts."""
    tasks = []
    for name in MODULES:
        examples = specs[name]["examples"]
        assert isinstance(examples, list) and examples, name
        mine = [t[f"rtforge.rtforge.{name}"] for t in examples if f"rtforge.rtforge.{name}" in t]
        assert mine, name
        for args in mine:
            assert set(args) <= set(specs[name]["spec"]), (name, set(args) - set(specs[name]["spec"]))
        tasks += ["".join(f"    {line}\n" for line in docs[name]["examples"].splitlines())]
    play = tmp_path / "examples.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n" + "".join(tasks))
    p = subprocess.run(["ansible-playbook", "--syntax-check", "-i", "pi-01,", str(play)], capture_output=True,
                       text=True, env=ENV, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_collection_builds_with_its_readme_and_licence(tmp_path):
    """ansible-galaxy's own build: the artifact holds the README galaxy.yml names and the GPL's text."""
    p = subprocess.run(["ansible-galaxy", "collection", "build", str(COLLECTION), "--output-path", str(tmp_path)],
                       capture_output=True, text=True, env=ENV, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    (artifact,) = tmp_path.glob("rtforge-rtforge-*.tar.gz")
    with tarfile.open(artifact) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))
        licence = tar.extractfile("LICENSE").read().decode() if "LICENSE" in names else ""
    assert {"README.md", "LICENSE", "MANIFEST.json"} <= names, sorted(names)
    assert manifest["collection_info"]["readme"] == "README.md"
    assert manifest["collection_info"]["license"] == ["GPL-2.0-or-later"]
    assert "GNU GENERAL PUBLIC LICENSE" in licence and "Version 2, June 1991" in licence
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_every_role_declares_the_variables_its_module_reads(roles, specs):
    """ansible-doc -t role shows each role's variables (meta/argument_specs.yml): whole sentences, the defaults
    of its defaults/main.yml, and every host variable its module takes an option from (its FROM_VARS; those of
    the ssh config are the ssh_config role's, which every other role depends on), of the option's type."""
    assert sorted(roles) == ROLES == ["deploy", "doctor", "fetch", "latency", "ssh_config"]
    p = subprocess.run([ansible_python(), "-c", DEFAULTS, str(COLLECTION), *ROLES], capture_output=True, text=True,
                       timeout=60, check=True)
    defaults = json.loads(p.stdout)
    for role, main in roles.items():
        assert main["short_description"] and main.get("author"), role
        options = main["options"]
        for var, doc in options.items():
            assert set(doc) <= OPTION_KEYS, (role, var, set(doc) - OPTION_KEYS)
            assert all(s.endswith(".") for s in sentences(doc["description"])), (role, var)
        for var, value in defaults[role].items():   # a default that is a template is said in words
            assert var in options, (role, var)
            assert options[var].get("default") == (None if "{{" in str(value) else value), (role, var)
        if role == "ssh_config":
            continue
        declared = options | roles["ssh_config"]["options"]
        for option, var in specs[role]["from_vars"].items():
            assert var in declared, (role, var)
            assert declared[var]["type"] == specs[role]["spec"][option]["type"], (role, var)


def test_a_role_given_a_variable_of_the_wrong_type_is_refused_by_ansibles_validator(tmp_path):
    """Ansible checks a role's variables against its meta/argument_specs.yml before its task: a board's
    rtforge_interval_us that is no number stops that board there, and rtforge is never run for it."""
    record = tmp_path / "ran"
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "roles": ["rtforge.rtforge.latency"]}]))
    inv = tmp_path / "lab.ini"
    inv.write_text("pi-01 ansible_host=127.0.0.1 rtforge_interval_us=often\n"
                   "pi-02 ansible_host=127.0.0.1 rtforge_interval_us=500\n")
    command = ["/bin/sh", "-c", f'echo "$2" >> {record}; exit 2', "rtforge"]
    p = subprocess.run(["ansible-playbook", "-i", str(inv), str(play), "-e", json.dumps(
        {"rtforge_command": command, "rtforge_ssh_config": str(tmp_path / "ssh_config"), "rtforge_retries": 0})],
        capture_output=True, text=True, env=ENV | {"ANSIBLE_STDOUT_CALLBACK": "rtforge.rtforge.events"},
        timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)
    events = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    refused = [e for e in events if e["event"] == "failed" and e["action"] == "ansible.builtin.validate_argument_spec"]
    assert [e["host"] for e in refused] == ["pi-01"], p.stdout + p.stderr
    assert "argument 'rtforge_interval_us' is of type" in refused[0]["result"]["msg"]
    assert record.read_text().split() == ["pi-02"]          # only the board whose variables passed was measured


# A host's string variables as the action plugins take them, against the template "{{ x }}" they stand for.
FROM_VAR = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible import constants as C
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.rtforge.rtforge.plugins.plugin_utils.oncontroller import ModuleOnController
out = []
for native in (False, True):
    for value in json.loads(sys.argv[2]):
        C.DEFAULT_JINJA2_NATIVE = native   # what ansible.cfg's jinja2_native sets; read as a Templar is made
        templar = Templar(loader=DataLoader(), variables={"x": value, "y": "[3, 4]"})
        plugin = ModuleOnController.__new__(ModuleOnController)
        plugin._templar = templar
        taken, rendered = plugin._from_var("x", value), templar.template("{{ x }}")
        out.append([value, native, repr(taken), repr(rendered)])
print(json.dumps(out))
"""


def test_a_hosts_string_variable_is_taken_as_its_template_would_render_it():
    """The action plugins take a plain string variable without compiling "{{ name }}" (a Jinja template
    made anew in every host's worker), yet as that template renders it: "[1, 2]" a list, "True" a bool, a
    template inside rendered, with Jinja's native types or without."""
    values = ["10000", "0-3", "cpu,io", "True", "false", "[1, 2]", '{"a": 1}', " 5 ", "line\n", "[broken",
              "{{ y }}", "1.5", "None"]
    p = subprocess.run([ansible_python(), "-c", FROM_VAR, str(COLLECTIONS), json.dumps(values)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for value, native, taken, rendered in json.loads(p.stdout):
        assert taken == rendered, (value, native)


def command_params(app: typer.Typer, *path: str) -> dict:
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return {p.name: p for p in command.params}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_each_latency_option_is_its_one_declaration_everywhere(name, docs, specs, roles):
    """data/latency_options.toml against every part that offers the option, field by field: the command
    lines (rtforge latency, rtforge fleet latency), the fleet's variables and the latency role's (its
    argument spec), the module as Ansible's Python loads it (its argument spec, host variable, the flag it
    passes on), ansible-doc, and rtforge's own model of a run (measure/spec.py: defaults, words, units)."""
    o = OPTIONS[name]
    flags = [o.flag, *([o.short] if o.short else [])]
    for params, fleet in ((command_params(latency_cli.app, "latency"), False),
                          (command_params(fleet_cli.app, "fleet", "latency"), True)):
        if not o.command and not fleet:
            assert name not in params
            continue
        p = params[name]
        assert sorted(p.opts) == sorted(flags) and p.is_flag == (o.type == "bool")
        assert p.default == (False if o.type == "bool" else None)      # unset: rtforge's default, or the board's
        assert p.help == o.help_text(fleet=fleet) and o.help in p.help
        assert (o.unset is None or f"default {o.unset}" in p.help) and (not fleet or o.variable in p.help)
        if o.type != "bool":
            assert p.metavar == o.value_name

    assert settings.LATENCY[name] == (o.variable, o.flag)
    var = roles["latency"]["options"][o.variable]             # the role's variable, in its argument spec
    assert var["type"] == o.type and var["description"][0] == o.text()[0].upper() + o.text()[1:] + "."
    assert var.get("default") == (None if o.command or o.type == "bool" else o.default)

    module = specs["latency"]
    spec = module["spec"][name]
    assert spec["type"] == o.type and module["from_vars"][name] == o.variable
    # the module leaves rtforge's defaults to rtforge; a flag is off; patience is the module's own
    assert spec.get("default") == (bool(o.default) if o.type == "bool" else None if o.command else o.default)
    assert (o.flag in module["argv"]) == o.command

    doc = docs["latency"]["doc"]["options"][name]
    assert doc["type"] == o.type and doc.get("default") == spec.get("default")
    what, *rest = doc["description"]
    assert what == o.text()[0].upper() + o.text()[1:] + "."
    assert f"C({o.variable})" in rest[-1] and (f"C({o.flag})" in rest[-1]) == o.command
    assert not o.command or o.type == "bool" or o.unset is None or str(o.unset) in rest[0]

    model = run_spec.LatencySpec()
    if name == "duration":
        assert model.duration_s == run_spec.parse_duration(o.default)
    elif o.default is not None and hasattr(model, name):
        assert getattr(model, name) == o.default
    choices = {"policy": run_spec.POLICIES, "engine": run_spec.ENGINES, "phase": run_spec.PHASES}
    assert o.choices == choices.get(name, ())
    assert o.unit == run_spec.LIMITS.get(name, (0, 0, o.unit))[2]


def test_the_module_expects_a_run_as_long_as_rtforge_does(specs):
    """Its deadline counts from rtforge's defaults: 60 s, and the loads' settling time when loads run."""
    plain, loaded = specs["latency"]["expected"]
    assert plain == run_spec.LatencySpec().expected_s == run_spec.parse_duration(OPTIONS["duration"].default)
    assert loaded == 10 + run_spec.LatencySpec(loads=["cpu"]).settle
