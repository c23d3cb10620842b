"""Board profiles: one TOML file per board in rtforge/data/boards/ (adding a
board is adding a file).  Every key is required and no other key is allowed,
so a typo in a board file is a bug that tests/unit/kernel/test_boards.py catches.

    description        one line for `rtforge kernel boards`
    aliases            other names users type (pi3-64 for the 64-bit Pi 3/4 row)
    arch               Kbuild ARCH= (arm, arm64, x86_64)
    cross_compile      Kbuild CROSS_COMPILE= (Debian's triplet, with the dash)
    toolchain_package  Debian package that provides <cross_compile>gcc
    image_target       make target of the kernel image: Image, zImage, bzImage;
                       the file is <build>/arch/<srcarch>/boot/<image_target>
    image_name         file name on the board's boot partition, never the stock
                       one, so installing cannot overwrite the stock kernel
    stock_image_name   the stock kernel's name there, for reference ("" if none)
    default_source     the source spec used when the user gives none
    config_fragment    a fragment applied right after the defconfig that this
                       board needs to work at all (QEMU boards: what virt needs
                       on top of allnoconfig); "" for none; or a table by
                       flavour ({ mainline = "arm64-16k-pages" }: the Pi 5's
                       16K pages, which only the mainline defconfig lacks).
                       Owned by the config step, which defines where the file
                       lives.  `--match` builds start from the running
                       configuration instead, and apply none.
    uname_m            what `uname -m` reports once this kernel runs
    pis                the Raspberry Pi models this kernel runs on, by their names
                       in data/pi_models.toml (pi0, pi3+, cm4, ...), which holds
                       each model's /proc/device-tree/model strings, CPU and SoC;
                       [] = not a Pi, no model check
    [defconfig]        per source flavour (raspberrypi, mainline): a file of
                       arch/<srcarch>/configs/, a make target of
                       arch/<srcarch>/Makefile (multi_v7_lpae_defconfig), or a
                       generic Kconfig target (defconfig, allnoconfig, tinyconfig)
    [dtbs], [overlays] per flavour: globs relative to the build directory's
                       arch/<srcarch>/boot/dts (any may match nothing: trees
                       moved 32-bit dts into broadcom/ in 6.5)
    user_cpus          the CPUs of the boards this kernel runs on, as qemu-user
                       names them (arm1176, cortex-a7, cortex-a53, cortex-a72,
                       cortex-a76): the board-side programs are run on each
    [[emulated]]       the QEMU machines this kernel is boot-tested on, each:
        machine        QEMU's -M, one of data/machines.toml (raspi0, raspi1ap,
                       raspi2b, raspi3ap, raspi3b, raspi4b (QEMU >= 9), virt, q35)
        dtb            per flavour, relative like dtbs ({} = none needed)
        cpu            (optional) QEMU's -cpu; "" or absent = the machine's own
        what           (optional) one line saying what the machine stands for
                       here, in place of the machine's own (virt: which CPU)
        stand_in       (optional, false) true when no QEMU machine emulates the
                       board itself (Pi 5): the boot test is then the closest
                       honest check, and says so
                       An empty list: the board has no boot test.

data/machines.toml holds what belongs to QEMU's machine rather than to a
kernel, one table per machine (every key required):
    what               one line saying what the machine stands for
    console            the kernel command line that puts the console (and an
                       early console) on the machine's UART
    [quirks]           kernel command-line additions for devices QEMU does not
                       model, each with the gap it works around (shown to users)
    [qemu_quirks]      QEMU options the machine needs, each with the gap it
                       works around (e.g. "-icount shift=auto")

API:
    load_boards() -> dict[str, Board]          every board, by canonical name
    get_board(name) -> Board                   name or alias; UserError if unknown
    srcarch_of(arch) -> str                    Kbuild's SRCARCH for an ARCH
    Board.defconfig_for(flavour) -> str        UserError if the board has none
    Board.defconfig_in(tree, flavour) -> str   same, and proven to exist in tree
    Board.dtb_globs(flavour), .overlay_globs(flavour), .emulated_manifest(flavour)
    Board.fits_model(model) / .fits_machine(uname_m) -> bool
    Board.to_dict() -> dict                    JSON-ready, for --json
"""

from __future__ import annotations

import difflib
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..device.deploy.manifest import fits
from ..device.firmware.pimodels import pi_model, pi_models
from ..errors import UserError
from . import aarch32

FLAVOURS = ("raspberrypi", "mainline")

# Kbuild: ARCH=x86_64/i386 build arch/x86 (top Makefile's SRCARCH).
_SRCARCH = {"x86_64": "x86", "i386": "x86", "x86": "x86", "arm": "arm", "arm64": "arm64", "riscv": "riscv"}
# The image targets each architecture's Makefile offers that a board may use.
_IMAGE_TARGETS = {"arm": {"zImage"}, "arm64": {"Image", "Image.gz"}, "x86": {"bzImage"}, "riscv": {"Image", "Image.gz"}}
# Kconfig targets valid for every architecture (scripts/kconfig/Makefile).
GENERIC_CONFIG_TARGETS = ("defconfig", "allnoconfig", "allyesconfig", "allmodconfig", "tinyconfig")

_TOP_KEYS = {
    "description": str, "aliases": list, "arch": str, "cross_compile": str, "toolchain_package": str,
    "image_target": str, "image_name": str, "stock_image_name": str, "default_source": str,
    "config_fragment": (str, dict), "uname_m": list, "pis": list, "user_cpus": list,
    "defconfig": dict, "dtbs": dict, "overlays": dict, "emulated": list,
}
_EMULATED_KEYS = {"machine": str, "dtb": dict}
_EMULATED_OPTIONAL = {"cpu": str, "what": str, "stand_in": bool}
_MACHINE_KEYS = {"what": str, "console": str, "quirks": dict, "qemu_quirks": dict}
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_REV_RE = re.compile(r"\s+rev\s*[\w.]+$", re.IGNORECASE)


class BoardFileError(Exception):
    """A shipped board file is malformed: a bug in rtforge, not the user's fault."""


def srcarch_of(arch: str) -> str:
    try:
        return _SRCARCH[arch]
    except KeyError:
        raise UserError(f"unknown kernel architecture '{arch}': use one of {', '.join(sorted(_SRCARCH))}") from None


def model_key(model: str) -> str:
    """'Raspberry Pi 4 Model B Rev 1.4\\0' -> 'Raspberry Pi 4 Model B'."""
    return _REV_RE.sub("", model.replace("\0", "").strip())


@dataclass(frozen=True)
class Emulated:
    """One QEMU machine a board's kernel boots on."""
    machine: str
    what: str
    stand_in: bool
    cpu: str
    console: str
    dtb: dict[str, str] = field(default_factory=dict)
    quirks: dict[str, str] = field(default_factory=dict)     # cmdline addition -> the gap it works around
    qemu_quirks: dict[str, str] = field(default_factory=dict)  # QEMU option(s) -> the gap they work around

    def qemu_args(self) -> list[str]:
        return [arg for option in self.qemu_quirks for arg in shlex.split(option)]

    def append(self) -> str:
        """The kernel command line QEMU passes: console, then the quirks."""
        return " ".join([self.console, *self.quirks])

    def manifest(self, flavour: str) -> dict | None:
        """As recorded in a bundle (the dtb by its name in the bundle's boot/);
        None when this flavour has no dtb for a machine that needs one."""
        dtb = self.dtb.get(flavour)
        if self.dtb and not dtb:
            return None
        return {"machine": self.machine, "what": self.what, "stand_in": self.stand_in, "cpu": self.cpu,
                "append": self.append(), "quirks": {**self.quirks, **self.qemu_quirks}, "qemu_args": self.qemu_args(),
                "dtb": Path(dtb).name if dtb else None}


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    aliases: tuple[str, ...]
    arch: str
    cross_compile: str
    toolchain_package: str
    image_target: str
    image_name: str
    stock_image_name: str
    default_source: str
    config_fragment: str | dict[str, str]
    uname_m: tuple[str, ...]
    pis: tuple[str, ...]
    user_cpus: tuple[str, ...]
    defconfig: dict[str, str]
    dtbs: dict[str, tuple[str, ...]]
    overlays: dict[str, tuple[str, ...]]
    emulated: tuple[Emulated, ...]

    @property
    def srcarch(self) -> str:
        return _SRCARCH[self.arch]

    @property
    def image_path(self) -> str:
        """The image relative to the build (O=) directory."""
        return f"arch/{self.srcarch}/boot/{self.image_target}"

    @property
    def dts_dir(self) -> str:
        """What dtb/overlay globs are relative to, in the build directory."""
        return f"arch/{self.srcarch}/boot/dts"

    def defconfig_for(self, flavour: str) -> str:
        if flavour not in self.defconfig:
            have = ", ".join(self.defconfig) or "none"
            raise UserError(f"board {self.name} has no configuration for a {flavour} source tree (it has: {have}); "
                            f"use a different --source")
        return self.defconfig[flavour]

    def defconfig_in(self, tree: Path, flavour: str) -> str:
        """The defconfig for this flavour, proven to exist in tree."""
        name = self.defconfig_for(flavour)
        if defconfig_exists(Path(tree), self.srcarch, name):
            return name
        raise UserError(f"the source tree has no arch/{self.srcarch}/configs/{name}, which board {self.name} needs"
                        + (f" (try --source {self.default_source})" if self.default_source else ""))

    def fragment_for(self, flavour: str) -> str:
        """The board's own fragment for a tree of this flavour ("" for none)."""
        if isinstance(self.config_fragment, dict):
            return self.config_fragment.get(flavour, "")
        return self.config_fragment

    def dtb_globs(self, flavour: str) -> tuple[str, ...]:
        return self.dtbs.get(flavour, ())

    def overlay_globs(self, flavour: str) -> tuple[str, ...]:
        return self.overlays.get(flavour, ())

    def emulated_manifest(self, flavour: str) -> list[dict]:
        """Every machine this flavour's kernel can be boot-tested on, as a bundle records it."""
        return [m for e in self.emulated if (m := e.manifest(flavour)) is not None]

    @property
    def models(self) -> tuple[str, ...]:
        """The /proc/device-tree/model prefixes of this board's Pis (from pi_models.toml)."""
        return tuple(dt for name in self.pis for dt in pi_model(name).dt_models)

    def fits_model(self, model: str) -> bool:
        """True if /proc/device-tree/model (with or without ' Rev x.y') names one
        of this board's Pis (the bundle manifest's rule); boards without Pis
        (QEMU, PCs) fit anything."""
        return not self.pis or fits(model, self.pis)

    def fits_machine(self, uname_m: str) -> bool:
        return uname_m.strip() in self.uname_m

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "emulated"}
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
        d["dtbs"] = {k: list(v) for k, v in self.dtbs.items()}
        d["overlays"] = {k: list(v) for k, v in self.overlays.items()}
        d["emulated"] = [{**vars(e), "append": e.append()} for e in self.emulated]
        d["models"] = list(self.models)
        d["srcarch"] = self.srcarch
        d["image_path"] = self.image_path
        return d


def defconfig_exists(tree: Path, srcarch: str, name: str) -> bool:
    """A configs/ file, a target of the arch Makefile, or a generic Kconfig target."""
    if name in GENERIC_CONFIG_TARGETS:
        return True
    if (tree / "arch" / srcarch / "configs" / name).is_file():
        return True
    makefile = tree / "arch" / srcarch / "Makefile"
    if makefile.is_file():
        return re.search(rf"^{re.escape(name)}\s*:", makefile.read_text(errors="replace"), re.MULTILINE) is not None
    return False


def _check_keys(where: str, doc: dict, spec: dict, optional: dict | None = None) -> None:
    optional = optional or {}
    missing = sorted(set(spec) - set(doc))
    unknown = sorted(set(doc) - set(spec) - set(optional))
    if missing or unknown:
        raise BoardFileError(f"{where}: missing keys {missing}, unknown keys {unknown}")
    for key, typ in {**spec, **optional}.items():
        if key in doc and not isinstance(doc[key], typ):
            names = " or a ".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
            raise BoardFileError(f"{where}: '{key}' must be a {names}")


def parse_machines(text: str) -> dict[str, dict]:
    """data/machines.toml's text, checked: machine name -> its what, console and quirks."""
    where = "data/machines.toml"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BoardFileError(f"{where}: {e}") from None
    for name, m in doc.items():
        if not isinstance(m, dict):
            raise BoardFileError(f"{where}: [{name}] must be a table")
        _check_keys(f"{where} [{name}]", m, _MACHINE_KEYS)
        if not all(isinstance(v, str) and v for v in [*m["quirks"].values(), *m["qemu_quirks"].values()]):
            raise BoardFileError(f"{where} [{name}]: every quirk says which gap it works around (a non-empty string)")
    return doc


@lru_cache(maxsize=1)
def machines() -> dict[str, dict]:
    return parse_machines((resources.files("rtforge.data") / "machines.toml").read_text())


def _emulated(where: str, arch: str, e: dict) -> Emulated:
    """A board's [[emulated]] entry, completed from its machine in machines.toml."""
    m = machines().get(e["machine"])
    if m is None:
        raise BoardFileError(f"{where}: machine '{e['machine']}' is not in data/machines.toml "
                             f"(it has: {', '.join(machines())})")
    what = e.get("what", m["what"])
    if aarch32.needs_entry(arch, e["machine"]):
        what += ", 32-bit kernel entered by a stand-in for the firmware's AArch32 start"
    return Emulated(e["machine"], what, e.get("stand_in", False), e.get("cpu", ""), m["console"],
                    _flavour_table(where, "emulated.dtb", e["dtb"], str), dict(m["quirks"]), dict(m["qemu_quirks"]))


def _flavour_table(where: str, key: str, table: dict, value_type: type) -> dict:
    bad = sorted(set(table) - set(FLAVOURS))
    if bad:
        raise BoardFileError(f"{where}: [{key}] has unknown flavours {bad} (known: {list(FLAVOURS)})")
    for flavour, value in table.items():
        strings = not isinstance(value, list) or all(isinstance(v, str) for v in value)
        if not isinstance(value, value_type) or not strings:
            raise BoardFileError(f"{where}: {key}.{flavour} must be a {value_type.__name__} of strings")
    return {f: tuple(v) if value_type is list else v for f, v in table.items()}


def parse_board(name: str, text: str) -> Board:
    """One board file's text -> Board; BoardFileError on anything malformed."""
    where = f"board file {name}.toml"
    doc = _board_document(where, text)
    if not _NAME_RE.match(name):
        raise BoardFileError(f"{where}: board names are lower-case letters, digits, '-' and '_'")
    arch = doc["arch"]
    _check_build_keys(where, doc)
    _check_identity_keys(where, doc)
    emulated = tuple(_emulated(where, arch, e) for e in doc["emulated"])
    return Board(
        name=name, description=doc["description"], aliases=tuple(doc["aliases"]), arch=arch,
        cross_compile=doc["cross_compile"], toolchain_package=doc["toolchain_package"],
        image_target=doc["image_target"], image_name=doc["image_name"], stock_image_name=doc["stock_image_name"],
        default_source=doc["default_source"],
        config_fragment=(_flavour_table(where, "config_fragment", doc["config_fragment"], str)
                         if isinstance(doc["config_fragment"], dict) else doc["config_fragment"]),
        uname_m=tuple(doc["uname_m"]), pis=tuple(doc["pis"]), user_cpus=tuple(doc["user_cpus"]),
        defconfig=_flavour_table(where, "defconfig", doc["defconfig"], str),
        dtbs=_flavour_table(where, "dtbs", doc["dtbs"], list),
        overlays=_flavour_table(where, "overlays", doc["overlays"], list),
        emulated=emulated,
    )


def _board_document(where: str, text: str) -> dict:
    """The board file as TOML with exactly the keys of a board, each of its
    type, and each [[emulated]] entry likewise."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BoardFileError(f"{where}: {e}") from None
    _check_keys(where, doc, _TOP_KEYS)
    for i, entry in enumerate(doc["emulated"]):
        if not isinstance(entry, dict):
            raise BoardFileError(f"{where}: [[emulated]] entries are tables")
        _check_keys(f"{where} [[emulated]] #{i + 1}", entry, _EMULATED_KEYS, _EMULATED_OPTIONAL)
    return doc


def _check_build_keys(where: str, doc: dict) -> None:
    """What the build hands to Kbuild and installs: an arch Kbuild has, an
    image target of that arch, a plain file name on the boot partition that
    is not the stock kernel's (installing never overwrites it), a
    cross-compiler prefix, at least one defconfig."""
    arch = doc["arch"]
    if arch not in _SRCARCH:
        raise BoardFileError(f"{where}: unknown arch '{arch}'")
    if doc["image_target"] not in _IMAGE_TARGETS[_SRCARCH[arch]]:
        raise BoardFileError(f"{where}: image_target '{doc['image_target']}' is not an image of arch {arch}")
    if not doc["image_name"] or doc["image_name"] == doc["stock_image_name"] or "/" in doc["image_name"]:
        raise BoardFileError(f"{where}: image_name must be a plain file name different from stock_image_name")
    if doc["cross_compile"] and not doc["cross_compile"].endswith("-"):
        raise BoardFileError(f"{where}: cross_compile is a prefix ending in '-'")
    if not doc["defconfig"]:
        raise BoardFileError(f"{where}: [defconfig] needs at least one flavour")


def _check_identity_keys(where: str, doc: dict) -> None:
    """The names a board is found by and checked against: its aliases, what
    `uname -m` reports on it, the Pi models it runs on (each known to
    pi_models.toml) and the CPUs its programs are run as; without a uname -m
    no running kernel could ever be checked against the board."""
    for key in ("aliases", "uname_m", "pis", "user_cpus"):
        if not all(isinstance(v, str) and v for v in doc[key]):
            raise BoardFileError(f"{where}: '{key}' must be a list of non-empty strings")
    if not doc["uname_m"]:
        raise BoardFileError(f"{where}: uname_m must name at least one machine")
    unknown = sorted(set(doc["pis"]) - set(pi_models()))
    if unknown:
        raise BoardFileError(f"{where}: pis names models pi_models.toml does not have: {unknown}")


@lru_cache(maxsize=1)
def _load() -> tuple[Board, ...]:
    folder = resources.files("rtforge.data") / "boards"
    boards = [parse_board(f.name.removesuffix(".toml"), f.read_text())
              for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith(".toml")]
    seen: dict[str, str] = {}
    for b in boards:
        for n in (b.name, *b.aliases):
            if n in seen:
                raise BoardFileError(f"board name or alias '{n}' is used by both {seen[n]} and {b.name}")
            seen[n] = b.name
    return tuple(boards)


def load_boards() -> dict[str, Board]:
    """Every shipped board by canonical name, in name order."""
    return {b.name: b for b in _load()}


def get_board(name: str) -> Board:
    """A board by name or alias (case-insensitive)."""
    wanted = name.strip().lower()
    for b in _load():
        if wanted == b.name or wanted in b.aliases:
            return b
    raise UserError(f"unknown board '{name}': {_suggest(wanted)} (`rtforge kernel boards` lists them all)")


def _suggest(wanted: str) -> str:
    """The boards a mistyped or shortened name may mean: every board one of
    whose names starts with it ('pi4' -> pi4-64, pi4-32; 'pi3' -> the pi3-64
    and pi3-32 aliases), else the close spellings; 64-bit first, as Raspberry
    Pi OS ships it."""
    boards = list(_load())
    by_name = {n: b for b in boards for n in (b.name, *b.aliases)}
    hits = [b for b in boards if wanted and any(n.startswith(wanted) for n in (b.name, *b.aliases))]
    if not hits:
        close = {by_name[n].name: by_name[n] for n in difflib.get_close_matches(wanted, by_name, n=4, cutoff=0.6)}
        hits = list(close.values())
    if not hits:
        return "use one of " + ", ".join(b.name for b in boards)
    hits.sort(key=lambda b: (b.arch not in ("arm64", "x86_64"), b.name))
    said = [f"{b.name} ({b.description}" + (f"; also called {', '.join(a for a in b.aliases if a.startswith(wanted))}"
                                            if any(a.startswith(wanted) for a in b.aliases) else "") + ")"
            for b in hits]
    return "did you mean " + " or ".join(said) + "?"
