"""Every option a build's .config changed against another .config (the
running kernel's), each with why -- read from the tree's own Kconfig files.

Kconfig moves options the user never named: PREEMPT_RT leaves the
preemption choice's other members off, some options `depend on !PREEMPT_RT`,
others have `default y if PREEMPT_RT`, and a symbol that was selected is no
longer once its selector is off.  For a kernel meant to match a running one,
each of those is a difference the user should see with its cause, not
discover later (a driver that is gone, a feature the RT kernel cannot have).

Values are compared as Kconfig means them: a bool or tristate missing from a
.config is n (Kconfig writes only what is visible), so the "# CONFIG_X is
not set" lines that appear when EXPERT makes options visible are no change.

    differences(running, built, tree, srcarch, asked) -> [Change]
    asked: {SYMBOL: "rt" | "latency" | "-K" | ...}: what the build asked for
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .kconfig import Definition, all_definitions, evaluate

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRISTATE = {"n": 0, "m": 1, "y": 2}


@dataclass
class Change:
    symbol: str
    old: str            # in the running kernel's .config ("n" / "(unset)" when absent)
    new: str            # in the built one
    why: str
    kind: str           # asked | follows | toolchain | source | kconfig
    causes: tuple[str, ...] = ()   # the changed symbols this one follows

    def line(self) -> str:
        return f"CONFIG_{self.symbol} {self.old} -> {self.new}: {self.why}"

    def to_dict(self) -> dict:
        return {"symbol": self.symbol, "old": self.old, "new": self.new, "why": self.why, "kind": self.kind,
                "causes": list(self.causes)}


def _is_bool(defs: list[Definition], *values: str | None) -> bool:
    kinds = {d.kind for d in defs if d.kind}
    if kinds:
        return kinds <= {"bool", "tristate"}
    return all(v in (None, "y", "m", "n") for v in values)


def _norm(value: str | None, boolish: bool) -> str:
    if value is None:
        return "n" if boolish else "(unset)"
    return value


def _atoms(expr: str) -> list[str]:
    text = re.sub(r'"[^"]*"', "", expr)
    return [t for t in dict.fromkeys(_SYMBOL.findall(text)) if t not in ("y", "m", "n", "if")]


def _changed_atoms(expr: str, old: dict[str, str], new: dict[str, str]) -> list[str]:
    return [a for a in _atoms(expr) if old.get(a, "n") != new.get(a, "n")]


def _said(atoms: list[str], new: dict[str, str]) -> str:
    return ", ".join(f"{a} is now {new.get(a, 'n')}" for a in atoms)


def _reverse_selects(defs: dict[str, list[Definition]]) -> dict[str, list[tuple[str, str, bool]]]:
    rev: dict[str, list[tuple[str, str, bool]]] = {}
    for owner, entries in defs.items():
        for d in entries:
            for target, cond, imply in d.selects:
                rev.setdefault(target, []).append((owner, cond, imply))
    return rev


def _active(owner: str, cond: str, config: dict[str, str]) -> bool:
    return config.get(owner, "n") in ("y", "m") and (not cond or evaluate(cond, config) > 0)


def _first_default(d: Definition, config: dict[str, str]) -> int | None:
    for i, (_value, cond) in enumerate(d.defaults):
        if not cond or evaluate(cond, config) > 0:
            return i
    return None


class _Explainer:
    def __init__(self, running: dict[str, str], built: dict[str, str], tree: Path, srcarch: str):
        self.old, self.new = running, built
        self.defs = all_definitions(tree, srcarch)
        self.selectors = _reverse_selects(self.defs)
        self.members: dict[int, list[str]] = {}
        for sym, entries in self.defs.items():
            for d in entries:
                if d.choice is not None:
                    self.members.setdefault(d.choice, []).append(sym)

    def why(self, sym: str) -> tuple[str, str, tuple[str, ...]]:
        """(why, kind, the changed symbols it follows) for a symbol whose value changed."""
        defs = self.defs.get(sym, [])
        if not defs:
            return "this source has no such option (the running kernel's source had it)", "source", ()
        found = [r for d in defs for r in (*self._dependencies(d), *self._choice(sym, d))]
        found += self._selectors(sym)
        if not found:
            # a default is the cause only when no dependency, choice or select of the symbol changed
            found = [r for d in defs for r in self._default(d)]
        if found:
            return ("; ".join(dict.fromkeys(reason for reason, _ in found)), "follows",
                    tuple(dict.fromkeys(c for _, causes in found for c in causes if c != sym)))
        # Kconfig runs the compiler for these ($(cc-option ...), $(CC_VERSION_TEXT)): another toolchain
        shell = [text for d in defs for text in [*d.depends, *(v for v, _ in d.defaults)] if "$(" in text]
        if shell:
            return f"Kconfig measures it from this machine's toolchain ({shell[0]})", "toolchain", ()
        if sym not in self.old:
            return ("not in the running kernel's configuration: this source offers it and Kconfig chose its "
                    "default"), "source", ()
        return "Kconfig decided (no dependency, select or default of it changed): see `make menuconfig`", \
            "kconfig", ()

    # Each finder below gives (reason, the changed symbols it names) pairs.

    def _dependencies(self, d: Definition) -> list[tuple[str, list[str]]]:
        """The `depends on` lines and enclosing conditions of one entry
        whose truth changed, with the symbols that changed in them."""
        found = []
        for expr in d.conditions + d.depends:
            if evaluate(expr, self.old) != evaluate(expr, self.new):
                atoms = _changed_atoms(expr, self.old, self.new)
                found.append((f"depends on {expr}: {_said(atoms, self.new)}" if atoms else f"depends on {expr}",
                              atoms))
        return found

    def _choice(self, sym: str, d: Definition) -> list[tuple[str, list[str]]]:
        """A member of a choice that is no longer y: the member newly chosen
        instead (Kconfig sets one member of a choice)."""
        if d.choice is None or self.new.get(sym, "n") == "y":
            return []
        chosen = [m for m in self.members.get(d.choice, []) if m != sym and self.new.get(m) == "y"
                  and self.old.get(m, "n") != "y"]
        if not chosen:
            return []
        return [(f"one choice with {chosen[0]} (the `choice` in {d.file}), which is now y", [chosen[0]])]

    def _selectors(self, sym: str) -> list[tuple[str, list[str]]]:
        """Every select or imply of sym that took effect or stopped: its
        owner changed, or the owner's `if` condition did."""
        found = []
        for owner, cond, imply in self.selectors.get(sym, []):
            was, now = _active(owner, cond, self.old), _active(owner, cond, self.new)
            if was == now:
                continue
            verb = "implied" if imply else "selected"
            when = f" (if {cond})" if cond else ""
            state = f"{owner} is now {self.new.get(owner, 'n')}"
            if cond and self.old.get(owner, "n") == self.new.get(owner, "n"):
                state = _said(_changed_atoms(cond, self.old, self.new), self.new) or state
            found.append((f"{'no longer ' if was else ''}{verb} by {owner}{when}: {state}",
                          [owner] + _changed_atoms(cond, self.old, self.new)))
        return found

    def _default(self, d: Definition) -> list[tuple[str, list[str]]]:
        """The default that applies now, when another one applied before or
        a symbol in it changed (a value Kconfig computes with $(...) names
        none)."""
        i_old, i_new = _first_default(d, self.old), _first_default(d, self.new)
        if i_new is None:
            return []
        value, cond = d.defaults[i_new]
        atoms = _changed_atoms(f"{value} {cond}", self.old, self.new) if "$(" not in value else []
        if i_old == i_new and not atoms:
            return []
        said = f"default {value}" + (f" if {cond}" if cond else "") + (f": {_said(atoms, self.new)}" if atoms else "")
        return [(said, atoms)]


def differences(running: dict[str, str], built: dict[str, str], tree: Path, srcarch: str,
                asked: dict[str, str]) -> list[Change]:
    """Every option whose value differs, asked-for ones first, then in name order."""
    explain = _Explainer(running, built, tree, srcarch)
    out = []
    for sym in sorted(set(running) | set(built)):
        defs = explain.defs.get(sym, [])
        boolish = _is_bool(defs, running.get(sym), built.get(sym))
        old, new = _norm(running.get(sym), boolish), _norm(built.get(sym), boolish)
        if old == new:
            continue
        if sym in asked:
            out.append(Change(sym, old, new, f"asked for ({asked[sym]})", "asked"))
        else:
            why, kind, causes = explain.why(sym)
            out.append(Change(sym, old, new, why, kind, causes))
    return sorted(out, key=lambda c: (c.kind != "asked", c.symbol))


def roots(changes: list[Change]) -> dict[str, set[str]]:
    """For each change, the asked-for options it follows from (through the
    chain of changed symbols), e.g. UNINLINE_SPIN_UNLOCK -> {PREEMPT_RT}."""
    by = {c.symbol: c for c in changes}
    memo: dict[str, set[str]] = {}

    def walk(sym: str, seen: frozenset) -> set[str]:
        if sym in memo:
            return memo[sym]
        c = by.get(sym)
        if c is None or sym in seen:
            return set()
        found = {sym} if c.kind == "asked" else set()
        for cause in c.causes:
            found |= walk(cause, seen | {sym})
        memo[sym] = found
        return found

    return {c.symbol: walk(c.symbol, frozenset()) for c in changes}


def report_lines(changes: list[Change]) -> list[str]:
    """The differences as text, grouped: asked for, what follows from it
    (with the asked options it traces back to), the toolchain, the source."""
    origin = roots(changes)
    groups: dict[str, list[str]] = {"asked": [], "follows": [], "toolchain": [], "source": [], "kconfig": []}
    for c in changes:
        line = c.line()
        if c.kind == "follows" and origin.get(c.symbol):
            line += f"  [from {', '.join(sorted(origin[c.symbol]))}]"
        groups[c.kind].append(line)
    titles = {"asked": "asked for by this build", "follows": "follow from those (Kconfig dependencies, selects, "
              "defaults)", "toolchain": "measured from this machine's compiler", "source": "differ because the "
              "source differs from the running kernel's", "kconfig": "not explained"}
    out = []
    for kind, lines in groups.items():
        if lines:
            out.append(f"{titles[kind]} ({len(lines)}):")
            out += [f"  {line}" for line in lines]
    return out
