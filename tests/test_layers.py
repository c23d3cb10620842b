"""The layers of docs/architecture.md, enforced: nothing imports from a layer above it."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "rtforge"

# layer -> the rtforge layers it may import (besides shared helpers)
ALLOWED = {
    "cli": {"kernel", "device", "measure", "monitor", "results", "report", "fleet"},
    "fleet": {"kernel", "device", "measure", "results", "report"},
    "kernel": {"device", "measure", "results"},
    "measure": {"device", "results"},
    "monitor": {"device", "measure", "results"},
    "device": set(),
    "results": set(),
    "report": {"results"},
}
# the top-level modules every layer may use; they use no layer themselves
SHARED = {"errors", "paths", "procfs", "preempt", "tools", "units", "cpulist", "__init__"}


def top(name: str) -> str:
    """A name imported from the rtforge package itself: a module or layer, else (a
    name such as __version__) something of its __init__."""
    return name if (SRC / name).is_dir() or (SRC / f"{name}.py").exists() else "__init__"


def imported_layers(path: Path, source: str | None = None) -> set[str]:
    tree = ast.parse(path.read_text() if source is None else source)
    rel = path.relative_to(SRC).parts
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = list(rel[:-1])[: len(rel) - node.level]
                if node.module:
                    out.add((base + node.module.split("."))[0])
                elif base:  # `from . import transport`: a module of this layer
                    out.add(base[0])
                else:  # `from .. import tools`: each name is a module of the package, or of its __init__
                    out |= {top(a.name) for a in node.names}
            elif node.module and node.module.startswith("rtforge."):
                out.add(node.module.split(".")[1])
            elif node.module == "rtforge":
                out |= {top(a.name) for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("rtforge.")}
    return out


def test_no_layer_imports_from_above():
    bad = []
    for layer, allowed in ALLOWED.items():
        for path in (SRC / layer).rglob("*.py"):
            for target in imported_layers(path) - allowed - SHARED - {layer}:
                bad.append(f"{path.relative_to(SRC)} imports {target}")
    assert bad == []


def test_shared_modules_import_no_layer():
    bad = [f"{name}.py imports {target}" for name in sorted(SHARED - {"__init__"})
           for target in imported_layers(SRC / f"{name}.py") - SHARED]
    assert bad == []


def test_relative_imports_of_a_package_are_seen():
    """`from .. import tools` names modules, not a package: the walk must see them."""
    source = "from .. import tools, report, __version__\nfrom rtforge import cli\nfrom . import transport\n"
    assert imported_layers(SRC / "device" / "x.py", source) == {"tools", "report", "__init__", "cli", "device"}


def test_no_module_over_500_lines():
    big = [f"{p.relative_to(SRC)}: {n}" for p in SRC.rglob("*.[pchs]*")
           if p.suffix in (".py", ".c", ".h", ".sh") and (n := len(p.read_text().splitlines())) > 500]
    assert big == []
