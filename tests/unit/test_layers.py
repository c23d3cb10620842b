"""The layers of docs/architecture.md, enforced: nothing imports from a layer
above it, and inside device/ and results/ no room imports a room it is not
allowed to."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "rtforge"

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
SHARED = {"errors", "paths", "procfs", "preempt", "tools", "units", "cpulist", "signals", "__init__"}

# device/ is in rooms: room -> the other rooms it may import.  Read downwards:
# transport (how a machine is reached, what it is) is below everything; the
# firmware model and the kernel's state read through it; deploy changes what
# boots; doctor judges the state; tune applies doctor's fixes through deploy.
DEVICE_ROOMS = {
    "transport": set(),
    "firmware": {"transport"},
    "state": {"transport"},
    "deploy": {"transport", "firmware"},
    "doctor": {"transport", "state"},
    "tune": {"transport", "firmware", "state", "deploy", "doctor"},
}
# results/ is in rooms around the run model, which stays at its top: what a
# stored run is (model, schema, hist), what is derived from it (stats, checks,
# system) and how its texts are shown (display).  The model imports no room.
# Read downwards: the store (run folders, raw/ read through rawfile, the
# index) is below every room that reads a run's files; soak, the monitor's
# windows and the promotion rule, needs the model alone; bench reads its
# steps' files through the store; raw finalizes a run from every engine's
# output, a benchmark's through bench; the importers read files people
# already have with raw's parsers and save them through the store.
RESULTS_MODEL = {"model", "schema", "hist", "stats", "checks", "system", "display"}
RESULTS_ROOMS = {
    "store": set(),
    "soak": set(),
    "bench": {"store"},
    "raw": {"store", "bench"},
    "importers": {"store", "raw"},
}
ROOMS = {"device": DEVICE_ROOMS, "results": RESULTS_ROOMS}
# layer -> the rooms of device/ it may use ("__init__": the transports device/ exports)
DEVICE_USERS = {
    "cli": {"__init__", *DEVICE_ROOMS},
    "fleet": {"transport", "deploy"},
    "kernel": {"firmware", "deploy", "transport"},  # --match reads a running kernel through a transport
    "measure": {"__init__", "transport"},
    "monitor": {"__init__", "transport"},
}


def top(name: str) -> str:
    """A name imported from the rtforge package itself: a module or layer, else (a
    name such as __version__) something of its __init__."""
    return name if (SRC / name).is_dir() or (SRC / f"{name}.py").exists() else "__init__"


def imported(path: Path, source: str | None = None) -> set[tuple[str, ...]]:
    """The rtforge modules and packages a file imports, as their names below
    rtforge: ("device", "transport", "facts"); a name of the package itself
    (`from .. import tools`, `from rtforge import __version__`) is its module
    or layer, else ("__init__",)."""
    tree = ast.parse(path.read_text() if source is None else source)
    package = list(path.relative_to(SRC).parts[:-1])
    out: set[tuple[str, ...]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                parts = package[: len(package) + 1 - node.level] + (node.module.split(".") if node.module else [])
            elif node.module and (node.module == "rtforge" or node.module.startswith("rtforge.")):
                parts = node.module.split(".")[1:]
            else:
                continue
            if not parts:  # `from .. import tools`: each name is a module of the package, or of its __init__
                out |= {(top(a.name),) for a in node.names}
            elif node.module:
                out.add(tuple(parts))
            else:  # `from . import transport`: modules of that package
                out |= {(*parts, a.name) for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {tuple(a.name.split(".")[1:]) for a in node.names if a.name.startswith("rtforge.")}
    return out


def imported_layers(path: Path, source: str | None = None) -> set[str]:
    return {parts[0] for parts in imported(path, source)}


def imported_rooms(path: Path, source: str | None = None, layer: str = "device") -> set[str]:
    """The rooms of a layer (device/, results/) a file imports: of results/ also
    the run model's modules; "__init__": what the layer itself exports."""
    return {parts[1] if len(parts) > 1 else "__init__" for parts in imported(path, source) if parts[0] == layer}


def test_no_layer_imports_from_above():
    bad = []
    for layer, allowed in ALLOWED.items():
        for path in (SRC / layer).rglob("*.py"):
            for target in imported_layers(path) - allowed - SHARED - {layer}:
                bad.append(f"{path.relative_to(SRC)} imports {target}")
    assert bad == []


def test_no_room_imports_a_room_it_may_not():
    bad = []
    for layer, rooms in ROOMS.items():
        for room, allowed in rooms.items():
            for path in (SRC / layer / room).rglob("*.py"):
                # of results/, the run model's modules are no room: every room may use them
                for target in (imported_rooms(path, layer=layer) - RESULTS_MODEL) - allowed - {room}:
                    bad.append(f"{path.relative_to(SRC)} imports {layer}/{target}")
    assert bad == []


def test_every_device_module_is_in_a_room():
    loose = sorted(p.name for p in (SRC / "device").glob("*.py") if p.name != "__init__.py")
    rooms = sorted(p.name for p in (SRC / "device").iterdir() if (p / "__init__.py").exists())
    assert loose == [] and rooms == sorted(DEVICE_ROOMS)
    assert imported_rooms(SRC / "device" / "__init__.py") == {"transport"}  # it exports the transports


def test_every_results_module_is_the_model_or_in_a_room():
    """results/ holds the run model side by side, at most 12 modules, and every other module in a room."""
    loose = sorted(p.stem for p in (SRC / "results").glob("*.py") if p.name != "__init__.py")
    rooms = sorted(p.name for p in (SRC / "results").iterdir() if (p / "__init__.py").exists())
    assert loose == sorted(RESULTS_MODEL) and len(loose) <= 12
    assert rooms == sorted(RESULTS_ROOMS)
    assert not [p for p in (SRC / "results").rglob("*") if p.is_dir() and p.name != "__pycache__"
                and not (p / "__init__.py").exists()]  # no folder that is a room without saying so


def test_the_run_model_imports_no_room():
    bad = [f"results/{name}.py imports results/{target}" for name in sorted(RESULTS_MODEL)
           for target in imported_rooms(SRC / "results" / f"{name}.py", layer="results") - RESULTS_MODEL]
    assert bad == []


def test_the_rooms_form_no_cycle():
    for layer, rooms in ROOMS.items():
        order: list[str] = []
        while len(order) < len(rooms):
            ready = [r for r, below in rooms.items() if r not in order and below <= set(order)]
            assert ready, f"a cycle among the rooms of {layer}/: {sorted(set(rooms) - set(order))}"
            order += sorted(ready)


def test_other_layers_use_only_their_rooms():
    bad = []
    for layer in ALLOWED:
        if layer == "device":
            continue
        for path in (SRC / layer).rglob("*.py"):
            for target in imported_rooms(path) - DEVICE_USERS.get(layer, set()):
                bad.append(f"{path.relative_to(SRC)} imports device/{target}")
    assert bad == []


def test_shared_modules_import_no_layer():
    bad = [f"{name}.py imports {target}" for name in sorted(SHARED - {"__init__"})
           for target in imported_layers(SRC / f"{name}.py") - SHARED]
    assert bad == []


def test_relative_imports_of_a_package_are_seen():
    """`from .. import tools` names modules, not a package: the walk must see them."""
    source = "from .. import tools, report, __version__\nfrom rtforge import cli\nfrom . import transport\n"
    assert imported_layers(SRC / "device" / "x.py", source) == {"tools", "report", "__init__", "cli", "device"}
    rooms = "from ..transport.facts import x\nfrom ... import tools\nfrom rtforge.device import ssh\nfrom . import y\n"
    assert imported_rooms(SRC / "device" / "deploy" / "x.py", rooms) == {"transport", "__init__", "deploy"}
    results = "from ..store import rawfile\nfrom .. import hist\nfrom . import probe\nfrom ...units import x\n"
    assert imported_rooms(SRC / "results" / "raw" / "x.py", results, layer="results") == {"store", "hist", "raw"}


def test_no_module_over_500_lines():
    big = [f"{p.relative_to(SRC)}: {n}" for p in SRC.rglob("*.[pchs]*")
           if p.suffix in (".py", ".c", ".h", ".sh") and (n := len(p.read_text().splitlines())) > 500]
    assert big == []
