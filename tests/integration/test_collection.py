"""The collection as Ansible's own tools read it (Debian's ansible-doc,
ansible-galaxy and ansible-playbook, and the Python they run under): every
module's documentation in Ansible's keys, each option whole and equal to
what the module takes, with examples that parse and an author; a built
artifact that carries its README and licence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rtforge.fleet.playbook import COLLECTIONS

COLLECTION = COLLECTIONS / "ansible_collections" / "rtforge" / "rtforge"
MODULES = sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py"))
ENV = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1"}

# The keys of Ansible's documentation format (ansible-doc adds collection, filename and has_action).
DOC_KEYS = {"module", "short_description", "description", "options", "author", "notes", "requirements", "seealso",
            "attributes", "version_added", "deprecated", "collection", "filename", "has_action"}
OPTION_KEYS = {"description", "type", "required", "default", "elements", "choices", "aliases", "suboptions",
               "version_added"}
RETURN_KEYS = {"description", "returned", "type", "elements", "sample", "contains", "version_added"}

# Under the Python Ansible runs (its modules' own), what each module takes (its ARGUMENT_SPEC, its FROM_VARS)
# and its EXAMPLES read as YAML.
SPECS = """
import importlib, json, sys
import yaml
sys.path.insert(0, sys.argv[1])
out = {}
for name in sys.argv[2:]:
    m = importlib.import_module("ansible_collections.rtforge.rtforge.plugins.modules." + name)
    examples = yaml.safe_load(getattr(m, "EXAMPLES", None) or "null")
    out[name] = {"spec": m.ARGUMENT_SPEC, "from_vars": getattr(m, "FROM_VARS", {}), "examples": examples}
print(json.dumps(out))
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
