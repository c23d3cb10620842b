"""What doctor reports, and the facts every check shares.

A finding has an id, a severity, the evidence it read (file or command and
value) and the exact fix; its words come from data/findings.toml, its
numbers from the check (device/doctor/checks_*.py).  ``Context`` derives, once, the
facts several checks need from a ``Snapshot``: the command line, the kernel
config, the isolated CPUs, whether this is a Raspberry Pi and where its
command line lives.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from functools import cached_property, lru_cache
from importlib import resources

from ...cpulist import format_cpulist
from ...preempt import preempt_model
from ..state.procparse import Unread, cmdline_value, isolcpus_cpus, parse_cmdline, parse_kconfig, target_cpulist
from ..state.snapshot import Snapshot
from ..state.tunestate import TuneState, parse_state

SEVERITIES = ("blocks-rt", "costs-latency", "note")
SEVERITY_WORDS = {"blocks-rt": "blocks RT", "costs-latency": "costs latency", "note": "note"}
# a count of findings: one blocks RT, two block RT; one note, two notes
_COUNTED = {"blocks-rt": ("blocks RT", "block RT"), "costs-latency": ("costs latency", "cost latency"),
            "note": ("note", "notes")}


def severity_counts(counts: dict[str, int], sep: str = " · ") -> str:
    """'0 block RT · 1 costs latency · 3 notes': the findings counted by severity."""
    return sep.join(f"{counts.get(s, 0):,} {_COUNTED[s][counts.get(s, 0) != 1]}" for s in SEVERITIES)


@lru_cache(maxsize=1)
def catalog() -> dict:
    return tomllib.loads((resources.files("rtforge.data") / "findings.toml").read_text())


def threshold(name: str):
    return catalog()["threshold"][name]


@dataclass
class Evidence:
    source: str          # a path on the target, or the command that was run
    value: str


@dataclass
class Finding:
    id: str
    severity: str
    title: str
    why: str
    fix: str
    fix_kind: str
    evidence: list[Evidence] = field(default_factory=list)
    tune: str | None = None          # the rtforge tune operation that fixes it

    def to_dict(self) -> dict:
        return asdict(self)


def cpus_text(cpus: set[int] | list[int]) -> str:
    return format_cpulist(set(cpus))


class Context:
    """A snapshot plus what the checks derive from it."""

    def __init__(self, snap: Snapshot, *, host_arg: str = "", isolate: set[int] | None = None,
                 window_s: float = 0.0):
        self.snap = snap
        self.host_arg = host_arg          # "pi@host " in fixes that name rtforge commands; "" locally
        self.extra_isolated = set(isolate or ())
        self.window_s = window_s
        self.unread: Unread = []          # CPU lists that are none, for the cpu-list-unreadable finding

    # -- making findings ---------------------------------------------------------
    def finding(self, fid: str, evidence: list[Evidence], variant: str | None = None, /,
                **params: object) -> Finding:
        # positional up to variant: a check's parameters (**params) are never taken for them
        spec = catalog()["finding"][fid]
        values = {"cmdline_file": self.cmdline_file, "host_arg": self.host_arg, "tick_ms": self.tick_ms,
                  "host": self.host_arg.strip() or "BOARD-ADDRESS",
                  "model": self.model or "this board", **params}
        fix = spec.get(f"fix_{variant}", spec["fix"]) if variant else spec["fix"]
        return Finding(id=fid, severity=spec["severity"], title=spec["title"].format(**values),
                       why=spec["why"].format(**values), fix=fix.format(**values), fix_kind=spec["fix_kind"],
                       evidence=evidence, tune=spec.get("tune") or None)

    def ev(self, path: str, value: str | None = None) -> Evidence:
        """Evidence from a file of the snapshot (its value, or what the check says)."""
        if value is None:
            value = self.snap.value(path)
            value = "(not there)" if value is None else value
        if "\n" not in value:
            value = " ".join(value.split())        # /proc/sys/kernel/printk separates with tabs
        return Evidence(path, value)

    # -- shared facts ------------------------------------------------------------------
    @cached_property
    def cmdline(self) -> list[tuple[str, str | None]]:
        return parse_cmdline(self.snap.value("/proc/cmdline") or "")

    def param(self, name: str) -> str | None:
        return cmdline_value(self.cmdline, name)

    @cached_property
    def kconfig_source(self) -> tuple[str, dict[str, str]] | None:
        """(where, options) from /proc/config.gz or /boot/config-<release>; None when neither."""
        gz = self.snap.command("config.gz")
        if gz:
            return "/proc/config.gz", parse_kconfig(gz)
        boot = f"/boot/config-{self.release}"
        text = self.snap.text(boot)
        return (boot, parse_kconfig(text)) if text else None

    def kconfig(self, name: str) -> str | None:
        """'y', 'm', 'n' or a value; None when the config is unknown."""
        if not self.kconfig_source:
            return None
        return self.kconfig_source[1].get(name, "n")

    def kconfig_line(self, name: str) -> str:
        """An option as the config file shows it (for evidence)."""
        options = self.kconfig_source[1] if self.kconfig_source else {}
        if name not in options:
            return f"{name} not in the config"
        return f"# {name} is not set" if options[name] == "n" else f"{name}={options[name]}"

    @property
    def release(self) -> str:
        return self.snap.value("/proc/sys/kernel/osrelease") or "?"

    @property
    def version(self) -> str:
        return self.snap.value("/proc/sys/kernel/version") or ""

    @cached_property
    def realtime(self) -> int | None:
        return self.snap.number("/sys/kernel/realtime")

    @cached_property
    def preempt(self) -> str:
        return preempt_model(self.version, None, self.realtime)

    @property
    def is_rt(self) -> bool:
        return self.preempt == "rt"

    @property
    def model(self) -> str | None:
        return self.snap.value("/proc/device-tree/model") or None

    @property
    def is_pi(self) -> bool:
        return bool(self.model and self.model.startswith("Raspberry Pi"))

    @cached_property
    def cmdline_file(self) -> str:
        if self.is_pi:
            for p in ("/boot/firmware/cmdline.txt", "/boot/cmdline.txt"):
                if self.snap.text(p) is not None:
                    return p
            return "cmdline.txt (on the boot partition)"
        return "GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub (then sudo update-grub)"

    @cached_property
    def hz(self) -> int | None:
        v = self.kconfig("CONFIG_HZ")
        return int(v) if v and v.isdigit() else None

    @property
    def tick_ms(self) -> str:
        return f"{1000 / self.hz:g}" if self.hz else "1-10"

    def cpus(self, path: str) -> set[int]:
        """A CPU list file of the target; one that is none is noted in `unread`."""
        return target_cpulist(self.snap.value(path), path, self.unread)

    def param_cpus(self, name: str) -> set[int]:
        """A CPU list parameter of /proc/cmdline; "N" is the last online CPU
        (the kernel's last possible one, which no file here shows)."""
        value = self.param(name)
        last = max(self.online) if self.online else None
        if name == "isolcpus":
            return isolcpus_cpus(value, self.unread, last)
        return target_cpulist(value, "/proc/cmdline", self.unread, as_read=f"{name}={value}", last=last)

    @cached_property
    def online(self) -> set[int]:
        return self.cpus("/sys/devices/system/cpu/online")

    @cached_property
    def isolated_boot(self) -> set[int]:
        """What the kernel isolated at boot: /sys/devices/system/cpu/isolated, isolcpus=."""
        return self.cpus("/sys/devices/system/cpu/isolated") | self.param_cpus("isolcpus")

    @cached_property
    def nohz_full(self) -> set[int]:
        """The CPUs that really run tickless (the sysfs file exists only with CONFIG_NO_HZ_FULL)."""
        return self.cpus("/sys/devices/system/cpu/nohz_full")

    @cached_property
    def tune_state(self) -> TuneState | None:
        """rtforge tune's saved state, if it was applied during this boot."""
        st = parse_state(self.snap.text("/var/lib/rtforge/tune-state.json"))
        boot_id = self.snap.value("/proc/sys/kernel/random/boot_id")
        return st if st and st.boot_id == boot_id else None

    @cached_property
    def isolated(self) -> set[int]:
        """CPUs meant for RT work: isolated at boot, nohz_full, tuned with
        rtforge tune --isolate, or named with doctor --isolate."""
        tuned = set(self.tune_state.isolate) if self.tune_state else set()
        return self.isolated_boot | self.nohz_full | tuned | self.extra_isolated

    @property
    def debarch(self) -> str:
        m = (self.snap.value("/proc/sys/kernel/arch") or self.snap.machine or "").strip()
        return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf", "i686": "i386"}.get(m, m or "ARCH")
