"""Raspberry Pi models as data (rtforge/data/pi_models.toml): what each
model's config.txt filters see, its default kernels and device tree, whether
it runs a 64-bit kernel, and how /proc/device-tree/model names it.

One table serves bootcheck (bootcfg), deploy (which model a board is) and
the kernel boards.  Every key of a model is required and no other is
allowed, so a typo in the data file is caught by the first load (a bug in
rtforge: ValueError, not a UserError).

    pi_model("pi4") -> PiModel                   UserError if unknown
    pi_models() -> {name: PiModel}               in the file's order
    model_for_dt("Raspberry Pi 4 Model B Rev 1.4") -> PiModel
    MODEL_FILTERS, known_kernel_bits(name), standard_initramfs(name),
    soc_kernel(name) -> (socs, why) | None
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ...errors import UserError

ARM64_KINDS = ("no", "yes", "only", "bcm2837-revision")
_KEYS = {"title": str, "dt_models": list, "filters": list, "board_type": int, "soc": str, "cpu": str, "dtb": str,
         "arm64": str, "arm_64bit_default": bool, "kernel32": str, "kernel64": list}


@dataclass(frozen=True)
class PiModel:
    name: str                   # also its most specific config.txt filter
    title: str
    dt_models: tuple            # /proc/device-tree/model prefixes (without " Rev x.y")
    filters: frozenset          # every model filter this board passes
    board_type: int             # revision-code Type field, for [board-type=0x..]
    soc: str
    cpu: str                    # e.g. cortex-a72 (qemu-user's -cpu name)
    dtb: str                    # the device tree the firmware loads by default
    arm64: str                  # no | yes | only | bcm2837-revision (only the BCM2837 board revision)
    arm_64bit_default: bool
    kernel32: str | None        # the default 32-bit kernel (None: runs 64-bit kernels only)
    kernel64: tuple             # default 64-bit kernels, in the order the firmware tries them

    @property
    def runs_64bit(self) -> bool:
        """Some board of this model runs a 64-bit kernel."""
        return self.arm64 != "no"

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "dt_models": list(self.dt_models),
                "filters": sorted(self.filters), "board_type": self.board_type, "soc": self.soc, "cpu": self.cpu,
                "dtb": self.dtb, "arm64": self.arm64, "arm_64bit_default": self.arm_64bit_default,
                "kernel32": self.kernel32, "kernel64": list(self.kernel64)}


def _check(name: str, table: dict) -> PiModel:
    if set(table) != set(_KEYS):
        raise ValueError(f"pi_models.toml [{name}]: keys {sorted(set(table) ^ set(_KEYS))} are wrong")
    for key, kind in _KEYS.items():
        if not isinstance(table[key], kind):
            raise ValueError(f"pi_models.toml [{name}].{key} must be a {kind.__name__}")
    if table["arm64"] not in ARM64_KINDS:
        raise ValueError(f"pi_models.toml [{name}].arm64 must be one of {ARM64_KINDS}")
    if name not in table["filters"]:
        raise ValueError(f"pi_models.toml [{name}] must pass its own filter [{name}]")
    if not table["kernel32"] and (table["arm64"] != "only" or not table["kernel64"]):
        # the firmware boots kernel32 whenever it does not boot 64-bit (bootcfg's kernel_names)
        raise ValueError(f"pi_models.toml [{name}] has no 32-bit kernel: it must run 64-bit kernels only "
                         "and name them")
    return PiModel(name, table["title"], tuple(table["dt_models"]), frozenset(table["filters"]), table["board_type"],
                   table["soc"], table["cpu"], table["dtb"], table["arm64"], table["arm_64bit_default"],
                   table["kernel32"] or None, tuple(table["kernel64"]))


@lru_cache(maxsize=1)
def _data() -> dict:
    doc = tomllib.loads((resources.files("rtforge.data") / "pi_models.toml").read_text())
    models = {name: _check(name, t) for name, t in doc["models"].items()}
    filters = frozenset(doc["model_filters"])
    for m in models.values():
        if not m.filters <= filters:
            raise ValueError(f"pi_models.toml [{m.name}] passes undocumented filters {sorted(m.filters - filters)}")
    return {"models": models, "filters": filters, "kernels": doc["kernels"], "soc_kernels": doc["soc_kernels"]}


def pi_models() -> dict[str, PiModel]:
    return dict(_data()["models"])


def pi_model(name: str) -> PiModel:
    models = _data()["models"]
    if name not in models:
        raise UserError(f"unknown model {name!r}: use one of {', '.join(models)}")
    return models[name]


def model_for_dt(dt_model: str | None) -> PiModel:
    """The model a /proc/device-tree/model string names ("Raspberry Pi 4
    Model B Rev 1.4" -> pi4): the longest matching prefix wins, so "Raspberry
    Pi 3 Model B Plus" is a pi3+, not a pi3."""
    text = (dt_model or "").strip("\0 \n")
    hits = [(len(p), m) for m in _data()["models"].values() for p in m.dt_models if text.startswith(p)]
    if not hits:
        raise UserError(f"'{dt_model}' is not a Raspberry Pi model rtforge knows: it knows "
                        f"{', '.join(m.title for m in _data()['models'].values())}")
    return max(hits, key=lambda h: h[0])[1]


def model_filters() -> frozenset:
    """Every documented model filter name ([pi4], [cm4s], ...)."""
    return _data()["filters"]


def known_kernel_bits(name: str) -> int | None:
    """32 or 64 for a standard kernel name (kernel8.img), None otherwise."""
    k = _data()["kernels"].get(name)
    return k["bits"] if k else None


def standard_initramfs(name: str) -> str | None:
    """The initramfs auto_initramfs loads with a standard kernel name."""
    k = _data()["kernels"].get(name)
    return k["initramfs"] if k else None


def soc_kernel(name: str) -> tuple[list[str], str] | None:
    """(SoCs, why) when a kernel's file name says it runs on those SoCs only."""
    for row in _data()["soc_kernels"]:
        if name.startswith(row["prefix"]):
            return list(row["socs"]), row["why"]
    return None
