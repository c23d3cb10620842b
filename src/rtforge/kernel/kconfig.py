"""Reading what Kconfig decided: .config values, requested options, and why
an option was dropped.

Kconfig silently drops an option whose dependencies are not met (architecture rule 5):
PREEMPT_RT without EXPERT is the classic.  So after configuring, every
requested option is read back from .config, and for each one that did not
stick, its `depends on` lines are found in the tree's Kconfig files and
evaluated against .config to name the unmet part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

_SET = re.compile(r"^CONFIG_([A-Za-z0-9_]+)=(.*)$")
_UNSET = re.compile(r"^# CONFIG_([A-Za-z0-9_]+) is not set$")


def parse_config(text: str) -> dict[str, str]:
    """{SYMBOL: value} with "n" for '# CONFIG_X is not set'; strings keep their quotes."""
    values = {}
    for line in text.splitlines():
        if m := _SET.match(line):
            values[m[1]] = m[2]
        elif m := _UNSET.match(line):
            values[m[1]] = "n"
    return values


def read_config(path: Path) -> dict[str, str]:
    return parse_config(Path(path).read_text(errors="replace"))


def parse_option(text: str) -> tuple[str, str]:
    """'-K CONFIG_X=y' / 'CONFIG_X' / 'X=m' / 'CONFIG_X=n' -> ("X", value)."""
    t = text.strip()
    m = re.fullmatch(r"(?:CONFIG_)?([A-Za-z0-9_]+)(?:=(.*))?", t)
    if not m or not m[1] or (m[2] is not None and m[2] == ""):
        raise UserError(f"'{text}' is not a kernel option: use CONFIG_NAME=y|m|n|NUMBER|\"string\"")
    value = m[2] if m[2] is not None else "y"
    if not re.fullmatch(r'[ymn]|-?\d+|0x[0-9a-fA-F]+|"[^"]*"', value):
        raise UserError(f"'{text}' has a value Kconfig cannot take: use y, m, n, a number or a \"quoted string\"")
    refuse_expansion({m[1]: value}, "-K")
    return m[1], value


# What make or the shell would run in a value: include/config/auto.conf is
# included by Kbuild's make, which expands $(...) and ${...} in it (a
# `$(shell ...)` runs), and recipes hand values to the shell (backquotes).
_EXPANDS = re.compile(r"\$[({]|`")


def refuse_expansion(options: dict[str, str], where: str) -> None:
    """UserError naming the first option whose value Kbuild would expand:
    a configuration is data, never a command (architecture rule 12)."""
    for sym, value in options.items():
        if _EXPANDS.search(value):
            raise UserError(f"{where} sets CONFIG_{sym}={value[:60]}, which Kbuild's make would run as a command "
                            "($(...), ${...} or a backquote): remove it; rtforge does not build with it")


def fragment_options(path: Path) -> dict[str, str]:
    """The options a .config fragment asks for."""
    try:
        return read_config(path)
    except OSError as e:
        raise UserError(f"cannot read the config fragment {path}: {e.strerror}") from None


def write_fragment(path: Path, options: dict[str, str]) -> None:
    path.write_text("".join(f"# CONFIG_{k} is not set\n" if v == "n" else f"CONFIG_{k}={v}\n"
                            for k, v in options.items()))


@dataclass
class Mismatch:
    symbol: str
    wanted: str
    got: str            # "n" when absent
    why: str            # the unmet dependency, or what Kconfig chose instead

    def sentence(self) -> str:
        return f"CONFIG_{self.symbol}={self.wanted} became {self.got} ({self.why})"


def mismatches(wanted: dict[str, str], config: dict[str, str], tree: Path, srcarch: str) -> list[Mismatch]:
    out = []
    for sym, want in wanted.items():
        got = config.get(sym, "n")
        if got == want or (want == "m" and got == "y"):
            continue
        out.append(Mismatch(sym, want, got, explain(sym, config, tree, srcarch)))
    return out


# -- why: the Kconfig side -------------------------------------------------------

@dataclass
class Definition:
    file: str
    conditions: list[str]    # enclosing `if` blocks and menu `depends on`, outermost first
    depends: list[str]       # the entry's own `depends on`
    kind: str = ""           # bool, tristate, int, hex, string ("" when the entry does not say)
    prompt: bool = False     # has a prompt: a user may set it (else only defaults and selects do)
    defaults: list[tuple[str, str]] = field(default_factory=list)        # (value, condition or "")
    selects: list[tuple[str, str, bool]] = field(default_factory=list)   # (symbol, condition, is imply)
    choice: int | None = None  # the `choice` block it is a member of


def _split_if(text: str) -> tuple[str, str]:
    """'EXPR if COND' -> (EXPR, COND); the 'if' inside a quoted prompt does not count."""
    masked = re.sub(r'"[^"]*"', lambda m: "_" * len(m[0]), text)
    m = re.search(r"\s+if\s+", masked)
    return (text[: m.start()].strip(), text[m.end():].strip()) if m else (text.strip(), "")


def _logical_lines(text: str):
    """Kconfig lines without comments, help text and backslash continuations."""
    help_indent: int | None = None
    in_help = False
    pending = ""
    for raw in text.expandtabs(8).splitlines():
        indent = len(raw) - len(raw.lstrip())
        if in_help:
            if not raw.strip():
                continue
            if help_indent is None:
                help_indent = indent
            if indent >= help_indent:
                continue
            in_help = False
        line = pending + raw.split("#")[0].strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line:
            continue
        if line in ("help", "---help---"):
            in_help, help_indent = True, None
            continue
        yield line


_SOURCE = re.compile(r'^(source|rsource|osource|orsource)\s+"([^"]+)"')


# The end of each block, and the kind of block it ends.
_BLOCK_ENDS = {"endif": "if", "endmenu": "menu", "endchoice": "choice"}


class _Blocks:
    """The if, menu and choice blocks open at a line of one Kconfig file,
    innermost last, each with its condition: an `if`'s expression, a menu's
    or choice's own `depends on` (None until one comes).  Entries inside
    carry those conditions; a choice also numbers its members."""

    def __init__(self) -> None:
        self.stack: list[tuple[str, str | None]] = []
        self.choices: list[int] = []        # the open `choice` blocks' ids, innermost last

    def conditions(self) -> list[str]:
        return [c for _, c in self.stack if c]

    @property
    def choice(self) -> int | None:
        return self.choices[-1] if self.choices else None

    def begin(self, kind: str, condition: str | None) -> None:
        self.stack.append((kind, condition))
        if kind == "choice":
            _CHOICE_IDS[0] += 1
            self.choices.append(_CHOICE_IDS[0])

    def end(self, kind: str) -> None:
        """endif, endmenu, endchoice: the innermost block of that kind, and
        any left open inside it (a malformed file is walked on, not refused)."""
        while self.stack and self.stack.pop()[0] != kind:
            pass
        if kind == "choice" and self.choices:
            self.choices.pop()

    def depends(self, expr: str) -> None:
        """A `depends on` of the menu or choice just opened: it holds for
        every entry inside, with any it had before."""
        kind, cond = self.stack[-1]
        self.stack[-1] = (kind, expr if cond is None else f"({cond}) && ({expr})")


def _opening(line: str) -> tuple[str, str | None] | None:
    """(kind, condition) of a line that opens a block; None for any other."""
    if line.startswith("if "):
        return "if", line[3:].strip()
    if line.startswith("menu "):
        return "menu", None
    if line == "choice" or line.startswith("choice "):
        return "choice", None
    return None


def _walk(tree: Path, srcarch: str, path: Path, conds: list[str], out: dict, seen: set) -> None:
    """Follow `source` from tree/Kconfig like Kconfig does, keeping the
    conditions (if-blocks, menu dependencies) each entry is nested in."""
    if path in seen or not path.is_file():
        return
    seen.add(path)
    blocks = _Blocks()
    entry: Definition | None = None     # the config entry the attribute lines belong to
    pending_menu = False                # a menu or choice just opened: its `depends on` lines may follow
    for line in _logical_lines(path.read_text(errors="replace")):
        here = conds + blocks.conditions()
        if m := _SOURCE.match(line):
            _walk_sourced(tree, srcarch, path, m, here, out, seen)
            entry = None
        elif opened := _opening(line):
            blocks.begin(*opened)
            # an if's condition is on its line; a menu's or a choice's comes in `depends on` lines
            entry, pending_menu = None, opened[0] != "if"
            continue
        elif line in _BLOCK_ENDS:
            blocks.end(_BLOCK_ENDS[line])
        elif m := re.match(r"^(?:menu)?config\s+(\w+)$", line):
            entry = Definition(str(path.relative_to(tree)), list(here), [], choice=blocks.choice)
            out.setdefault(m[1], []).append(entry)
        elif entry is not None and _attribute(entry, line):
            continue
        elif line.startswith("depends on"):
            expr = line.removeprefix("depends on").strip()
            if pending_menu and blocks.stack:
                blocks.depends(expr)
            elif entry is not None:
                entry.depends.append(expr)
            continue
        elif re.match(r"^(comment|mainmenu)\b", line):
            entry = None
        pending_menu = pending_menu and not re.match(r"^(config|menuconfig|if|source|comment)\b", line)


def _walk_sourced(tree: Path, srcarch: str, path: Path, source: re.Match, conds: list[str], out: dict,
                  seen: set) -> None:
    """Walk the files a `source` line names, in the conditions around it:
    $(SRCARCH) is the arch's, rsource/orsource are relative to the file
    itself (the others to the tree), and a glob names every file it matches."""
    name = source[2].replace("$(SRCARCH)", srcarch).replace("$SRCARCH", srcarch)
    base = path.parent if source[1].startswith(("r", "or")) else tree
    for p in sorted(base.glob(name)) if any(ch in name for ch in "*?[") else [base / name]:
        _walk(tree, srcarch, p, conds, out, seen)


_TYPE = re.compile(r"^(bool|tristate|int|hex|string|def_bool|def_tristate)\b\s*(.*)$")
_CHOICE_IDS = [0]


def _attribute(entry: Definition, line: str) -> bool:
    """One attribute line of a config entry (type, prompt, default, select);
    False for anything else (depends on and block keywords are the walker's)."""
    if m := _TYPE.match(line):
        kind, rest = m[1], m[2].strip()
        entry.kind = kind.removeprefix("def_")
        if kind.startswith("def_"):
            entry.defaults.append(_split_if(rest))
        elif rest.startswith('"'):
            entry.prompt = True
        return True
    if line.startswith("prompt "):
        entry.prompt = True
        return True
    if line.startswith("default "):
        entry.defaults.append(_split_if(line[len("default "):]))
        return True
    if m := re.match(r"^(select|imply)\s+(.*)$", line):
        target, cond = _split_if(m[2])
        entry.selects.append((target, cond, m[1] == "imply"))
        return True
    return False


_TREE_CACHE: dict[tuple[str, str], dict[str, list[Definition]]] = {}


def all_definitions(tree: Path, srcarch: str) -> dict[str, list[Definition]]:
    """Every symbol's entries in the tree's Kconfig files for arch/<srcarch>, read once."""
    key = (str(tree), srcarch)
    if key not in _TREE_CACHE:
        out: dict[str, list[Definition]] = {}
        _walk(tree, srcarch, tree / "Kconfig", [], out, set())
        _TREE_CACHE[key] = out
    return _TREE_CACHE[key]


def definitions(symbol: str, tree: Path, srcarch: str) -> list[Definition]:
    return all_definitions(tree, srcarch).get(symbol, [])


def _unmet(expr: str, config: dict[str, str]) -> str:
    bad = [f"{s} is {config.get(s, 'n')}" for s in false_atoms(expr, config)]
    return ", ".join(bad) or "not met"


def explain(symbol: str, config: dict[str, str], tree: Path, srcarch: str) -> str:
    defs = definitions(symbol, tree, srcarch)
    if not defs:
        return f"this tree has no option {symbol} for arch/{srcarch}"
    unmet = []
    for d in defs:
        for cond in d.conditions:
            if evaluate(cond, config) == 0:
                unmet.append(f"inside `if {cond}` ({d.file}): {_unmet(cond, config)}")
        for expr in d.depends:
            if evaluate(expr, config) == 0:
                unmet.append(f"depends on {expr}: {_unmet(expr, config)}")
    if unmet:
        return "; ".join(dict.fromkeys(unmet))
    return "its dependencies are met: a choice or a `select` elsewhere decided, see `make menuconfig`"


# -- Kconfig expressions: y=2, m=1, n=0; && is min, || is max, ! is 2-x --------

_TOKEN = re.compile(r'\s*(&&|\|\||!=|[!=()<>]=?|"[^"]*"|[A-Za-z0-9_]+)')


def _tokens(expr: str) -> list[str]:
    pos, out = 0, []
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            break  # an expression we do not understand: evaluate what we have
        out.append(m[1])
        pos = m.end()
    return out


def _value(tok: str, config: dict[str, str]) -> str:
    if tok in ("y", "m", "n") or tok.startswith('"') or re.fullmatch(r"-?\d+|0x[0-9a-fA-F]+", tok):
        return tok.strip('"')
    return config.get(tok, "n").strip('"')


_TRI = {"y": 2, "m": 1, "n": 0}


def evaluate(expr: str, config: dict[str, str]) -> int:
    toks = _tokens(expr)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def primary() -> int:
        t = take() if peek() is not None else "n"
        if t == "!":
            return 2 - primary()
        if t == "(":
            v = disjunction()
            if peek() == ")":
                take()
            return v
        if peek() in ("=", "!="):
            op, other = take(), take() if peek() is not None else "n"
            same = _value(t, config) == _value(other, config)
            return 2 if same == (op == "=") else 0
        return _TRI.get(_value(t, config), 0)

    def conjunction() -> int:
        v = primary()
        while peek() == "&&":
            take()
            v = min(v, primary())
        return v

    def disjunction() -> int:
        v = conjunction()
        while peek() == "||":
            take()
            v = max(v, conjunction())
        return v

    return disjunction() if toks else 2


def false_atoms(expr: str, config: dict[str, str]) -> list[str]:
    """Symbols that make expr false: plain ones that are n (negated ones that are set)."""
    toks = _tokens(expr)
    out = []
    for i, t in enumerate(toks):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t) or t in ("y", "m", "n"):
            continue
        negated = i > 0 and toks[i - 1] == "!"
        compared = (i + 1 < len(toks) and toks[i + 1] in ("=", "!=")) or (i > 0 and toks[i - 1] in ("=", "!="))
        value = config.get(t, "n")
        if compared:
            continue
        if (value == "n") != negated:
            out.append(t)
    return list(dict.fromkeys(out))
