"""CPU lists, the one parser of the program: what a user types (latency's
--cpus, doctor's and tune's --isolate) and what a target's /proc, /sys and
kernel command line hold.

The grammar is the kernel's own (lib/bitmap-str.c, bitmap_parselist, and
Documentation/admin-guide/kernel-parameters.rst, "cpu lists"): numbers and
ranges separated by commas ("0-3,6"); a range may take a group pattern,
"100-2000:2/25" being the first 2 CPUs of every 25 from 100 to 2000; "N" is
the last CPU and "all" every CPU, both known only from the target.  The
kernel refuses anything else, "0-7:2" included (a ':' wants its '/'), and so
does this parser: a list the kernel refuses isolated nothing.  Where the
kernel prints "(null)" (nohz_full without the option) or nothing, the list
is empty.

A list is text anyone can write, and "0-99999999999" is eleven characters:
every number is checked against a bound before a range is expanded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .units import shown  # noqa: F401  (procparse takes it from here)

# A generous NR_CPUS: no kernel numbers a CPU at or above it (x86-64's MAXSMP
# builds for 8192 CPUs, arm64 for at most 4096).  Callers that know the
# target's CPUs check against those; this bound is for everything else.
NR_CPUS_MAX = 8192

# bitmap_getnum in lib/bitmap-str.c: a decimal number or "N"; "all" a whole range.
# ASCII digits only, as the kernel's _parse_integer (Python's \d takes any script's).
_REGION = re.compile(r"(?:(?P<all>(?i:all))|(?P<start>[0-9]+|N)(?:-(?P<end>[0-9]+|N))?)"
                     r"(?::(?P<used>[0-9]+)/(?P<group>[0-9]+))?")
_LONGEST = 40          # characters of one region: far more than any real one, short enough to print
# Every CPU below NR_CPUS_MAX one by one, "0,1,2,...,8191", is 38 kB: a longer
# list repeats itself or is no list, and splitting it would cost memory.
_LONGEST_LIST = 65536


class CpuListError(ValueError):
    """Not a CPU list, or one naming CPUs that cannot exist; the message says which part."""


@dataclass(frozen=True)
class Region:
    """start-end, of which the first `used` CPUs of every `group` (the whole range without a pattern)."""
    start: int
    end: int
    used: int
    group: int

    def cpus(self, upto: int) -> set[int]:
        """The CPUs of the region up to and including `upto`."""
        end = min(self.end, upto)
        return {c for base in range(self.start, end + 1, self.group)
                for c in range(base, min(base + self.used, end + 1))}


def regions(text: str | None, last: int | None = None) -> list[Region]:
    """The regions of a list, checked as the kernel checks them but not
    expanded; `last` is the target's last CPU, what "N" and "all" mean."""
    text = (text or "").strip()
    if text in ("", "(null)"):
        return []
    if len(text) > _LONGEST_LIST:
        raise CpuListError(f"a list of {len(text)} characters is longer than one of every CPU there can be")
    out = []
    for part in text.split(","):
        part = part.strip()
        m = _REGION.fullmatch(part) if len(part) <= _LONGEST else None
        if not m and re.fullmatch(r"[0-9]+-[0-9]+:[0-9]+", part):
            raise CpuListError(f"'{part}' is not a range the kernel reads: its pattern is USED/GROUP CPUs, "
                               "e.g. 0-7:1/2 for every other CPU")
        if not m:
            raise CpuListError(f"'{shown(part)}' is not a CPU number or range")
        if (m["all"] or "N" in (m["start"], m["end"])) and last is None:
            raise CpuListError(f"'{part}' names the last CPU, which is not known here")
        top = last if last is not None else 0   # (the "N" and "all" above were refused without it)
        if m["all"]:
            start, end = 0, top
        else:
            start = top if m["start"] == "N" else int(m["start"])
            end = start if not m["end"] else top if m["end"] == "N" else int(m["end"])
        group = int(m["group"]) if m["group"] else end - start + 1
        used = int(m["used"]) if m["used"] else group
        if end < start or group < 1 or used > group:
            raise CpuListError(f"'{part}' is not a valid CPU range")
        out.append(Region(start, end, used, group))
    return out


def parse_cpulist(text: str | None, *, limit: int = NR_CPUS_MAX, last: int | None = None) -> set[int]:
    """The CPUs of a list, none numbered `limit` or above (checked before any
    range is expanded); CpuListError otherwise."""
    found = regions(text, last)
    beyond = [r.end for r in found if r.end >= limit]
    if beyond:
        raise CpuListError(f"CPU {max(beyond)} is beyond {limit - 1}, the highest CPU number there can be")
    return {c for r in found for c in r.cpus(limit - 1)}


def split(found: list[Region], top: int, available: set[int] | None = None) -> tuple[set[int], str]:
    """The CPUs named up to `top` that are in `available` (all of them when it
    is None), and as a list those named that are not: a region beyond `top`
    as its range, never expanded ("4-99999999999")."""
    cpus = set().union(*(r.cpus(top) for r in found))
    missing = cpus - available if available is not None else set()
    beyond = sorted({(max(r.start, top + 1), r.end) for r in found if r.end > top})
    ranges = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in beyond)
    return cpus - missing, ",".join(x for x in (format_cpulist(missing), ranges) if x)


def format_cpulist(cpus) -> str:
    """{0, 1, 2, 5} -> "0-2,5", the form /proc/irq/N/smp_affinity_list prints."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_cpumask(text: str | None) -> set[int]:
    """A hex CPU mask as /proc/irq/default_smp_affinity prints it ("f",
    "00000000,0000000f": 32-bit words, the highest first); CpuListError for
    anything else or a CPU at NR_CPUS_MAX or above."""
    digits = (text or "").strip().replace(",", "").lstrip("0")
    if len(digits) > NR_CPUS_MAX // 4 or not re.fullmatch(r"[0-9a-fA-F]*", digits):
        raise CpuListError(f"'{shown(text or '')}' is not a CPU mask of at most {NR_CPUS_MAX} CPUs")
    value = int(digits or "0", 16)
    return {i for i in range(value.bit_length()) if value >> i & 1}


def format_cpumask(cpus) -> str:
    return f"{sum(1 << c for c in set(cpus)):x}"
