"""The options of a latency run, declared once (data/latency_options.toml)
and read here by everything that offers them: the command lines of
`rtforge latency` and `rtforge fleet latency` (cli/common.py), the fleet's
inventory variables (fleet/settings.py) and the collection's latency module
(fleet/collection.py writes its files from these).

What an option is shows the same way in each: its help, the bounds rtforge
holds it to (LIMITS, the one place those are kept), its choices and what
rtforge does when it is not given.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .loads import load_profiles
from .spec import LIMITS

TYPES = ("str", "int", "float", "bool")


@dataclass(frozen=True)
class Option:
    name: str
    type: str                                   # Ansible's: str, int, float or bool
    help: str
    unit: str = ""
    bounds: bool = False
    choices: tuple[str, ...] = ()
    default: str | int | float | bool | None = None
    default_is: str | None = None
    short: str | None = None
    metavar: str | None = None
    command: bool = True                        # an option of `rtforge latency` (patience is the fleet's)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def variable(self) -> str:
        """The inventory variable that gives it per board (and the module's FROM_VARS)."""
        return "rtforge_" + self.name

    @property
    def value_name(self) -> str | None:
        return self.metavar or ("|".join(self.choices) if self.choices else None)

    @property
    def unset(self) -> str | None:
        """What rtforge does when it is not given, in words (None for a flag: it is off)."""
        if self.type == "bool":
            return None
        return self.default_is or (None if self.default is None else str(self.default))

    def text(self) -> str:
        """What it is, with its bounds and the words it takes: the same sentence in --help and ansible-doc."""
        out = self.help
        if self.bounds:
            lo, hi, _ = LIMITS[self.name]
            out += f", {_digits(lo)} to {_digits(hi)}"
        if self.choices:
            out += ": " + " or ".join(self.choices)
        if self.name == "load":   # the profiles are data/loads.toml's
            out += ": " + ", ".join(load_profiles())
        return out

    def help_text(self, *, fleet: bool = False) -> str:
        """--help's line: with the default and, for the fleet, the variable that gives it per board."""
        said = [f"default {self.unset}"] if self.unset else []
        said += [f"per board: {self.variable}"] if fleet else []
        return self.text() + (f" ({'; '.join(said)})" if said else "")


def _digits(n: float) -> str:
    """10000000 -> '10 000 000', as rtforge's messages write the bounds."""
    return f"{int(n):,}".replace(",", " ") if float(n).is_integer() else f"{n:g}"


# each field of a [table] and the TOML type it is written in (choices: an array, a tuple in Option)
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "type": str, "help": str, "unit": str, "bounds": bool, "choices": list, "default": (str, int, float, bool),
    "default_is": str, "short": str, "metavar": str, "command": bool}


def _option(name: str, fields: dict[str, Any]) -> Option:
    """One table of the file.  It is rtforge's own, so a wrong one is a bug (ValueError), found at import."""
    for key, value in fields.items():
        kind = _FIELDS.get(key)
        if kind is None or not isinstance(value, kind):
            raise ValueError(f"latency_options.toml: {name}.{key} = {value!r} is not a field of an option "
                             "or not of its type")
    # (Any: each value was checked against its field just above)
    given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    option = Option(name=name, **given)
    if option.type not in TYPES:
        raise ValueError(f"latency_options.toml: {name} has type {option.type!r}, not one of {TYPES}")
    return option


def _load() -> dict[str, Option]:
    doc = tomllib.loads((resources.files("rtforge.data") / "latency_options.toml").read_text())
    return {name: _option(name, fields) for name, fields in doc.items()}


OPTIONS: dict[str, Option] = _load()
