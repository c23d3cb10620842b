"""cyclictest's command line, where a file records it: the ``cmdline`` of
its --json, or a line of a saved terminal session (a shell prompt followed
by the command, or a wrapper's ``running cmd:``).

It tells what the output itself does not: the histogram's size (rt-tests
2.x prints only non-empty rows), and which CPU each thread ran on --
cyclictest's ``T: n`` and its JSON's ``"cpu"`` are thread numbers unless
threads were pinned with ``-a``/``--affinity`` or ``-S``/``--smp``.
A recorded command line is the file's, never something rtforge runs.
"""

from __future__ import annotations

import re

from .common import NUM

# cyclictest's getopt string is "a::A::b:c:d:D:F:h:H:i:l:MNo:p:mnqrRsSt::uvD:x".
SHORT_WITH_VALUE = set("bcdDFhHilop")
SHORT_OPTIONAL = set("aAt")
SHORT_NAMES = {"a": "affinity", "b": "breaktrace", "D": "duration", "h": "histogram", "H": "histofall",
               "i": "interval", "l": "loops", "N": "nsecs", "p": "priority", "q": "quiet", "t": "threads",
               "S": "smp", "y": "policy"}
LONG_WITH_VALUE = {"breaktrace", "clock", "distance", "duration", "fifo", "histogram", "histfile", "histofall",
                   "interval", "json", "latency", "loops", "mainaffinity", "oscope", "priority", "policy", "spike",
                   "spike-nodes", "deepest-idle-state", "delay"}
DEFAULT_INTERVAL_US = 1000  # cyclictest --help: "base interval of thread in us default=1000"
DURATION_RE = re.compile(r"([0-9]{1,9})([smhdSMHD]?)")
SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# A saved session's command line: "pi@raspberrypi:~ $ sudo cyclictest -p90 ...", "# cyclictest ...",
# or a wrapper's "running cmd: cyclictest ...".
TEXT_CMD_RE = re.compile(r"(?:running cmd:\s*|\S*[#$>]\s+)?(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?(cyclictest(?:\s.*)?)")
MAX_CPU = 8191


def parse_cmdline(cmdline: str) -> dict[str, str | None]:
    """cyclictest's options by long name, the way its getopt_long reads them.

    The JSON joins argv with spaces without quoting, so splitting on
    whitespace is the faithful inverse.
    """
    argv = cmdline.split()
    opts: dict[str, str | None] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            if not eq and name in LONG_WITH_VALUE and i < len(argv):
                value, i = argv[i], i + 1
            opts[name] = value if eq or name in LONG_WITH_VALUE else None
        elif arg.startswith("-") and len(arg) > 1:
            for k in range(1, len(arg)):
                c, rest = arg[k], arg[k + 1:]
                name = SHORT_NAMES.get(c, c)
                if c in SHORT_WITH_VALUE:
                    if not rest and i < len(argv):
                        rest, i = argv[i], i + 1
                    opts[name] = rest
                    break
                if c in SHORT_OPTIONAL:
                    # cyclictest also takes "-t 2" and "-a 2,3" by peeking at the next word.
                    if not rest and c in "ta" and i < len(argv) and re.fullmatch(r"[0-9][0-9,-]*", argv[i]):
                        rest, i = argv[i], i + 1
                    opts[name] = rest or None
                    break
                opts[name] = None
    return opts


def number(value: str | None) -> int | None:
    return int(value) if value is not None and re.fullmatch(NUM, value) else None


def duration_s(value: str | None) -> int | None:
    m = DURATION_RE.fullmatch(value or "")
    return int(m[1]) * SECONDS[m[2].lower()] if m else None


def histogram_size(opts: dict[str, str | None]) -> int | None:
    return number(opts.get("histogram") or opts.get("histofall"))


def _cpu_set(text: str) -> list[int] | None:
    """'2,3' or '6-11' (cyclictest's affinity list, bounded) -> the CPUs in order; None if unreadable."""
    cpus: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"([0-9]{1,5})(?:-([0-9]{1,5}))?", part)
        if not m or int(m[2] or m[1]) < int(m[1]) or int(m[2] or m[1]) > MAX_CPU:
            return None
        cpus.extend(range(int(m[1]), int(m[2] or m[1]) + 1))
    return sorted(set(cpus)) or None  # a CPU set: cyclictest walks it in CPU order, whatever the order typed


def thread_cpus(opts: dict[str, str | None], threads: int) -> list[int] | None:
    """The CPU each thread was pinned to, or None when they were not pinned
    (then cyclictest's thread numbers say nothing about CPUs)."""
    if "smp" in opts or ("affinity" in opts and not opts["affinity"]):
        return list(range(threads))           # -S / -a: thread N on CPU N
    if opts.get("affinity"):
        cpus = _cpu_set(opts["affinity"] or "")
        if cpus:
            return [cpus[i % len(cpus)] for i in range(threads)]  # round-robin over the set
    return None


def find_in_text(line: str) -> str | None:
    """The cyclictest command of a saved session's line, or None."""
    m = TEXT_CMD_RE.fullmatch(line.strip())
    return m[1].strip() if m else None
