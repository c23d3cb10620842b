"""The rtforge_* variables of a board, checked with rtforge's own rules
before any board is touched.

Where a value comes from is Ansible's precedence: an option given to
`rtforge fleet` is passed as an extra variable, so it wins over host and
group variables, which win over rtforge's own defaults (a variable left
unset is an option not given).  The same merge is made here only to check
each board's values and to say, for a bad one, which board and which
variable or option holds it -- the roles pass the values to rtforge as
they are.
"""

from __future__ import annotations

from typing import Any

from ..errors import UserError
from ..kernel.boards import get_board
from ..measure.loads import parse_loads
from ..measure.options import OPTIONS
from ..measure.spec import LatencySpec, parse_cpu_list, parse_duration, parse_int, parse_number
from ..report.verdict import parse_cycle_time
from ..units import parse_span_s, shown

# latency option -> (inventory variable, command-line flag), from their one declaration (data/latency_options.toml)
LATENCY = {o.name: (o.variable, o.flag) for o in OPTIONS.values()}
# read by rtforge fleet itself (the report, the deploy's checks)
CYCLE_TIME, BOARD, BUNDLE, RETRIES = "rtforge_cycle_time", "rtforge_board", "rtforge_bundle", "rtforge_retries"


def text_of(value: Any) -> str:
    """An inventory value as rtforge's options read it: INI's `rtforge_cpus=0,1` arrives as a tuple,
    YAML's `rtforge_interval_us: 1000` as a number."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def truth(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    t = text_of(value).strip().lower()
    if t in ("true", "yes", "on", "1"):
        return True
    if t in ("false", "no", "off", "0", ""):
        return False
    raise UserError(f"{where} is '{shown(t)}': use true or false")


def latency_settings(host: str, hostvars: dict, given: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """option -> (value, where it came from) for one board: given (the command line) over its variables."""
    out: dict[str, tuple[Any, str]] = {}
    for key, (var, flag) in LATENCY.items():
        if given.get(key) not in (None, False):
            out[key] = (given[key], flag)
        elif hostvars.get(var) is not None:
            out[key] = (hostvars[var], var)
    return out


def check_latency(host: str, settings: dict[str, tuple[Any, str]]) -> LatencySpec:
    """The board's run as `rtforge latency` would check it: every value, before anything starts."""
    def val(key: str) -> str | None:
        return text_of(settings[key][0]) if key in settings else None

    def where(key: str) -> str:
        return f"{host}: {settings[key][1]}"

    try:
        current = None
        if "duration" in settings and "loops" in settings:
            raise UserError(f"{host}: {settings['duration'][1]} and {settings['loops'][1]} are both set: keep one")
        current = "duration"
        given = val("duration")
        duration = parse_duration(given if given is not None else str(OPTIONS["duration"].default))
        spec = LatencySpec(duration_s=None if "loops" in settings else duration)
        # each number, word and flag read by its declared type; the options of their own kind after
        for o in OPTIONS.values():
            current = o.name
            if o.name in settings:
                _set_typed(spec, o, settings[o.name][0], where(o.name))
        current = "cpus"
        if (cpus := val("cpus")) is not None:
            spec.cpus = parse_cpu_list(cpus)
        current = "load"
        spec.loads = parse_loads(load) if (load := val("load")) is not None else []
        current = "patience"
        if (patience := val("patience")) is not None and parse_span_s(patience, where("patience"), "90s or 5m") < 1:
            raise UserError(f"{where('patience')} is shorter than a second")
        current = None
        spec.validate(None, where=f"on {host}", whose="its")
    except UserError as e:
        text = str(e)
        prefix = "" if text.startswith(host) else (f"{where(current)}: " if current in settings else f"{host}: ")
        raise UserError(prefix + text) from None
    return spec


def _set_typed(spec: LatencySpec, o, value: Any, where: str) -> None:
    """One option's value on the spec, read by its declared type (cpus, load and the spans have their own)."""
    text = text_of(value)
    if o.type == "int":
        setattr(spec, o.name, parse_int(where, text, o.name))
    elif o.type == "float":
        setattr(spec, o.name, parse_number(where, text, o.name))
    elif o.type == "bool":
        on = truth(value, where)
        if hasattr(spec, o.name):   # --install is how to start, not what to measure
            setattr(spec, o.name, on)
    elif o.choices:
        setattr(spec, o.name, text.strip().lower())


def cycle_ns(host: str, hostvars: dict, given: str | None) -> int | None:
    """The board's own cycle time (rtforge_cycle_time), unless the command line names one for all."""
    text = given if given is not None else hostvars.get(CYCLE_TIME)
    if text is None:
        return None
    try:
        return parse_cycle_time(text_of(text))
    except UserError as e:
        raise UserError(f"{host}: {e}" if given is None else str(e)) from None


def retries(host: str, hostvars: dict) -> int | None:
    """A host's rtforge_retries, checked here as --retries is (Ansible's own error comes late, in many lines)."""
    value = hostvars.get(RETRIES)
    if value is None:
        return None
    text = text_of(value).strip()
    if not text.isdigit() or not 0 <= int(text) <= 100:
        raise UserError(f"{host}: {RETRIES} is '{shown(text)}': use a number of tries from 0 to 100")
    return int(text)


def board_name(host: str, hostvars: dict) -> str | None:
    """The board profile a host's rtforge_board names (pi4-64, pi5, ...), checked."""
    name = hostvars.get(BOARD)
    if name is None:
        return None
    try:
        return get_board(text_of(name)).name
    except UserError as e:
        raise UserError(f"{host}: {BOARD}: {e}") from None
