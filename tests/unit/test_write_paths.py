"""Every file rtforge writes goes through one helper per language, which
never writes through a link or waits on a FIFO (docs/architecture.md,
"Threat model"): in Python paths.write_atomic, create_new and
open_existing; on a target the shell helpers of data/safe.sh (through
Transport.write_bytes); in the probe safefile.c.  This test reads the code
and fails on a write that bypasses them, outside the few places listed
below with the reason they are safe."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "rtforge"
# kernel/ writes build trees and bundles in rtforge's cache and dist folders
# (its inputs are checked as in "Build inputs and bundles"); the Ansible
# collection runs under Ansible's Python on the controller.
SKIP = ("kernel/", "ansible/")
HELPERS = {"paths.py"}
# (module, what) -> why it is safe
ALLOWED = {
    ("measure/launch.py", "write_text"): "the run's files staged in a fresh private TemporaryDirectory",
    ("measure/launch.py", "shutil.copy"): "the run's programs staged in a fresh private TemporaryDirectory",
    ("device/deploy/manifest.py", "write_text"): "a bundle's manifest, written into the bundle kernel/ builds",
}
WRITE_MODES = re.compile(r"[wa+]")   # "x" alone is O_CREAT|O_EXCL: never through a link
RENAMES = {"copy", "copy2", "copyfile", "copytree", "move"}


def _writes(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                 None)
            if isinstance(mode, ast.Constant) and WRITE_MODES.search(str(mode.value)):
                found.append((node.lineno, "open"))
        elif isinstance(f, ast.Attribute):
            recv = ast.unparse(f.value)
            if f.attr in ("write_text", "touch"):
                found.append((node.lineno, f.attr))
            elif f.attr == "write_bytes" and not re.search(r"(^|\.)(t|transport|self)$", recv):
                found.append((node.lineno, "write_bytes"))   # a Path's; a transport's goes through safe.sh
            elif recv == "os" and f.attr == "open" and "os.devnull" not in (call := ast.unparse(node)) and \
                    re.search(r"O_(CREAT|WRONLY|RDWR|APPEND|TRUNC)", call):
                found.append((node.lineno, "os.open"))
            elif recv == "shutil" and f.attr in RENAMES:
                found.append((node.lineno, f"shutil.{f.attr}"))
    return found


def test_python_writes_go_through_the_helpers():
    bad = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC).as_posix()
        if rel.startswith(SKIP) or rel in HELPERS:
            continue
        for line, what in _writes(ast.parse(p.read_text())):
            if (rel, what) not in ALLOWED:
                bad.append(f"{rel}:{line}: {what}")
    assert not bad, "writes that bypass paths.write_atomic/create_new/open_existing:\n" + "\n".join(bad)


def test_the_finder_finds_what_it_must():
    """The scanner itself: each kind of write it must catch, caught."""
    code = ("open(p, 'w')\nopen(p, mode='ab')\np.write_text(s)\np.write_bytes(b)\nos.open(p, os.O_WRONLY)\n"
            "shutil.copy(a, b)\np.touch()\nt.write_bytes(p, b)\nopen(p)\nos.open(p, os.O_RDONLY)\n")
    assert [w for _, w in _writes(ast.parse(code))] == ["open", "open", "write_text", "write_bytes", "os.open",
                                                         "shutil.copy", "touch"]


C_WRITE = re.compile(r"\bfopen\s*\([^;]*\"[wa]|\bopen\s*\([^;]*O_(CREAT|WRONLY|RDWR|APPEND|TRUNC)|\bcreat\s*\(")


def test_the_probe_writes_through_safefile():
    bad = []
    for folder in ("probe", "nqueens", "bootinit"):
        for p in sorted((SRC / folder).glob("*.c")):
            if p.name == "safefile.c":
                continue
            for n, line in enumerate(p.read_text().splitlines(), 1):
                # a device of the kernel's (/dev/cpu_dma_latency, the console) is not a file
                if C_WRITE.search(line) and '"/dev/' not in line and "O_EXCL" not in line:
                    bad.append(f"{p.relative_to(SRC)}:{n}: {line.strip()}")
    assert not bad, "C writes that bypass safefile.c:\n" + "\n".join(bad)
