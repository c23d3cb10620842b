"""The layers of DESIGN.md, enforced: nothing imports from a layer above it."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "rtforge"

# layer -> the rtforge layers it may import (besides shared helpers)
ALLOWED = {
    "cli": {"kernel", "device", "measure", "results", "report"},
    "kernel": {"device", "measure", "results"},
    "measure": {"device", "results"},
    "device": set(),
    "results": set(),
    "report": {"results"},
}
SHARED = {"errors", "paths", "procfs", "preempt", "__init__"}


def imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    rel = path.relative_to(SRC).parts
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = list(rel[:-1])[: len(rel) - node.level]
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("rtforge"):
                parts = node.module.split(".")[1:]
            else:
                continue
            if parts:
                out.add(parts[0])
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


def test_no_module_over_500_lines():
    big = [f"{p.relative_to(SRC)}: {n}" for p in SRC.rglob("*.[pch]*")
           if p.suffix in (".py", ".c", ".h") and (n := len(p.read_text().splitlines())) > 500]
    assert big == []
