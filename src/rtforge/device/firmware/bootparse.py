"""How the Raspberry Pi firmware reads config.txt: lines, filters, includes,
and read access to the boot partition it reads them from.

This is half of the firmware *model* behind `rtforge bootcheck` (the other
half, which picks kernel, dtb, initramfs and cmdline, is ``bootcfg``).  Every
rule cites the Raspberry Pi documentation it follows (config_txt pages
"What is config.txt", "Conditional filters", "Boot options", and the EEPROM
boot flow's tryboot section).  Where the documentation is silent, the branch
says so and takes the reading that makes bootcheck *warn* rather than guess.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...errors import UserError
from ...paths import resolved
from .pimodels import PiModel, model_filters

# Entries are cut at 98 characters and the firmware ignores the rest (What is
# config.txt, File format; older firmware cut at 78/80).
LINE_LIMIT = 98
MAX_INCLUDE_DEPTH = 8
# What one boot configuration (config.txt or tryboot.txt with everything it
# includes) may make bootcheck read.  The documentation gives no limit; the
# firmware reads from a small FAT boot partition, and a real configuration
# is a file of a hundred lines or so with an include or two.  These bounds
# are far above that and keep a fan-out finite: 50 includes of a file that
# includes the next one 50 times, 6 deep, is 50^6 files to read.
MAX_FILES_READ = 100           # config.txt and each include, every time it is included
MAX_LINES_READ = 10_000        # of all those files together
MAX_FILE_BYTES = 1 << 20       # of one file
BOUNDS = f"{MAX_FILES_READ} files, {MAX_LINES_READ} lines and {MAX_FILE_BYTES >> 10} KiB a file"

# The keys that decide what boots.  A warning about a malformed line is only
# worth the user's attention when the line is one of these.
BOOT_KEYS = frozenset({"kernel", "os_prefix", "arm_64bit", "initramfs", "ramfsfile", "auto_initramfs",
                       "cmdline", "device_tree", "include"})

# Every model filter in the Conditional filters table (data/pi_models.toml).
# They form one filter type, and a filter replaces the earlier one of its own
# type (Conditional filters, Combining conditional filters).
MODEL_FILTERS = model_filters()


class BootFiles(Protocol):
    """Read access to a boot partition; names are relative to its root."""

    def read(self, name: str, limit: int | None = None) -> bytes | None:
        """The file's bytes (at most `limit`), or None when it does not exist."""

    def exists(self, name: str) -> bool:
        """Whether the regular file exists."""


def boot_path(name: str) -> str | None:
    """Normalise a file name from config.txt to a path below the partition
    root, or None if it would leave the partition.  A leading '/' means the
    partition root ("Boot options", os_prefix note: absolute paths bypass
    prefixes), so it is simply dropped here."""
    rel = name.replace("\\", "/").lstrip("/")
    p = posixpath.normpath(rel) if rel else "."
    return None if p == "." or p == ".." or p.startswith("../") else p


class DirFiles:
    """A boot partition that is a local directory (a mounted card, a tree)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, name: str) -> Path | None:
        rel = boot_path(name)
        if rel is None:
            return None
        full = self.root / rel
        try:  # a symlink may not lead out of the partition
            resolved(full, f"{rel} on the boot partition {self.root}").relative_to(resolved(self.root, str(self.root)))
        except ValueError:
            return None
        return full if full.is_file() else None

    def read(self, name: str, limit: int | None = None) -> bytes | None:
        p = self._path(name)
        if p is None:
            return None
        with open(p, "rb") as f:
            return f.read(-1 if limit is None else limit)

    def exists(self, name: str) -> bool:
        return self._path(name) is not None


class OverlayFiles:
    """`base` with some files replaced (str/bytes) or removed (None): lets
    deploy check a tryboot.txt or config.txt it has not written yet."""

    def __init__(self, base: BootFiles, files: dict):
        self.base = base
        self.files = {boot_path(k): v for k, v in files.items()}

    def read(self, name: str, limit: int | None = None) -> bytes | None:
        key = boot_path(name)
        if key not in self.files:
            return self.base.read(name, limit)
        v = self.files[key]
        data = v.encode("latin-1", "replace") if isinstance(v, str) else v
        return None if data is None else data[: None if limit is None else limit]

    def exists(self, name: str) -> bool:
        key = boot_path(name)
        return self.files[key] is not None if key in self.files else self.base.exists(name)


def as_files(boot) -> BootFiles:
    if isinstance(boot, (str, Path)):
        if not Path(boot).is_dir():
            raise UserError(f"boot partition {boot} is not a directory: give the mounted boot partition "
                            "(e.g. /media/$USER/bootfs or /boot/firmware)")
        return DirFiles(Path(boot))
    return boot


@dataclass(frozen=True)
class Setting:
    """One `key=value` (or `initramfs FILE ADDR` / `include FILE`) line."""
    key: str
    value: str
    where: str            # "config.txt:12"
    section: str          # "[pi4]", "[pi4][tryboot]", "[all]" or "" (no filter seen yet)
    filters: tuple        # ((type, filter), ...) in effect for this line
    applies: bool | None  # None: depends on something bootcheck cannot know (GPIO, EDID, ...)
    why_not: str = ""     # when it does not apply: "model", "none", "tryboot", "unknown"

    def origin(self) -> str:
        return f"{self.where}, in {self.section}" if self.section else self.where


@dataclass
class FirmwareConfig:
    """config.txt (or tryboot.txt) and what it includes, as the firmware reads it."""
    settings: list[Setting] = field(default_factory=list)   # every setting line, in firmware order
    warnings: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)

    def applied(self) -> list[Setting]:
        return [s for s in self.settings if s.applies]

    def last(self, key: str) -> Setting | None:
        """A later line for a property overrides an earlier one (the file
        format as Ubuntu's Raspberry Pi boot-config guide describes it): the
        last applied line wins."""
        hits = [s for s in self.settings if s.applies and s.key == key]
        return hits[-1] if hits else None


def filter_type(token: str) -> str:
    if token in MODEL_FILTERS:
        return "model"
    if token.startswith("board-type="):
        return "board-type"
    if token in ("none", "tryboot"):
        return token
    # EDID=, gpioN=, HDMI:, serial numbers and expression filters: each name
    # is its own type, since only same-type filters replace each other.
    return re.split(r"[=:&<>]", token, maxsplit=1)[0] or token


def runtime_filter(token: str) -> bool:
    """A documented filter whose outcome depends on the board at boot time
    (EDID=, gpioN=, HDMI:, serial number, expression filters over boot
    variables) rather than on anything in the files."""
    return bool(re.match(r"(EDID=|gpio\d|HDMI:|0x[0-9a-fA-F]+$)", token)) or bool(re.search(r"[=&<>]", token))


def filter_truth(ftype: str, token: str, model: PiModel, tryboot: bool) -> bool | None:
    """Whether a filter passes for `model` (a Pi 400 passes [pi4] and [pi400])."""
    if ftype == "model":
        return token in model.filters
    if ftype == "none":
        return False  # [none]: what follows applies to no hardware (Conditional filters)
    if ftype == "tryboot":
        return tryboot  # [tryboot]: passes only when the tryboot reboot flag is set
    if ftype == "board-type":
        try:
            return int(token.split("=", 1)[1], 0) == model.board_type
        except ValueError:
            return None
    return None  # GPIO level, monitor, serial number...: not knowable from the files


class _Reader:
    def __init__(self, files: BootFiles, model: PiModel, tryboot: bool):
        self.files, self.model, self.tryboot, self.out = files, model, tryboot, FirmwareConfig()
        self.state: dict[str, str] = {}   # filter type -> filter token, in the order first set
        self.label = ""
        self.none_then_filter = False     # a filter line followed [none] without [all] in between
        self.stack: list[str] = []        # files being read, for include loops
        self.seen: set[str] = set()       # the warnings, for a quick test (there may be thousands)
        self.files_read = 0
        self.lines_read = 0
        self.cut = False                  # a bound was reached: nothing more is read

    def warn(self, msg: str) -> None:
        if msg not in self.seen:
            self.seen.add(msg)
            self.out.warnings.append(msg)

    def stop(self, where: str, what: str) -> None:
        """Stop reading at a bound, with the one warning that says so."""
        self.cut = True
        self.warn(f"{where}: bootcheck stopped reading here: {what}, far more than any real configuration "
                  f"(bootcheck reads at most {BOUNDS}); the lines after this one were not read, so the kernel, "
                  "dtb, initramfs and cmdline shown may not be what the firmware picks: include each file once "
                  "and keep the configuration short.")

    def read(self, path: str, where: str) -> bytes | None:
        """A file of the configuration, within the bounds (None when it is not there or a bound is reached)."""
        if self.cut:
            return None
        if self.files_read >= MAX_FILES_READ:
            self.stop(where, f"this configuration reads more than {MAX_FILES_READ} files in all (config.txt and "
                             "each include, every time it is included)")
            return None
        data = self.files.read(path, MAX_FILE_BYTES + 1)
        if data is None:
            return None
        self.files_read += 1
        if len(data) > MAX_FILE_BYTES:
            self.warn(f"{path} is larger than {MAX_FILE_BYTES >> 10} KiB, far more than any real configuration file: "
                      f"bootcheck read only its first {MAX_FILE_BYTES >> 10} KiB, so what it shows may not be what "
                      "the firmware picks; restore the file from a backup or write it anew.")
            data = data[:MAX_FILE_BYTES]
        return data

    def truth(self) -> tuple[bool | None, str]:
        verdicts = [(filter_truth(t, tok, self.model, self.tryboot), t) for t, tok in self.state.items()]
        for ok, t in verdicts:
            if ok is False:
                return False, t if t in ("model", "none", "tryboot") else "unknown"
        if any(ok is None for ok, _ in verdicts):
            return None, "unknown"
        return True, ""

    def section_line(self, text: str, where: str) -> None:
        tokens = re.findall(r"\[([^\]]*)\]", text)
        rest = re.sub(r"\[[^\]]*\]", "", text).strip()
        if not tokens:
            self.warn(f"{where}: {text!r} is not a complete filter; write it as [name].")
            return
        if rest:
            self.warn(f"{where}: text after the filter ({rest!r}) is not part of the documented format; "
                      "put comments on their own line starting with '#'.")
        for tok in tokens:
            tok = tok.strip()
            if tok == "all":  # [all] clears every filter in effect (Conditional filters)
                self.state.clear()
                self.none_then_filter = False
                self.label = "[all]"
                continue
            if "none" in self.state and tok != "none":
                self.none_then_filter = True
            if filter_type(tok) not in ("model", "board-type", "none", "tryboot") and not runtime_filter(tok):
                hint = f" (names are case-sensitive: [{tok.lower()}])" if tok.lower() in MODEL_FILTERS else ""
                self.warn(f"{where}: [{tok}] is not a documented filter{hint}; bootcheck assumes the lines after "
                          "it do not apply: fix the filter name.")
            self.state[filter_type(tok)] = tok
            self.label = "".join(f"[{v}]" for v in self.state.values())

    def setting(self, key: str, value: str, where: str, indented: bool, raw_len: int) -> None:
        ok, why = self.truth()
        s = Setting(key, value, where, self.label, tuple(self.state.items()), ok, why)
        self.out.settings.append(s)
        if key not in BOOT_KEYS:
            return
        if raw_len > LINE_LIMIT:
            self.warn(f"{where} is longer than {LINE_LIMIT} characters and the firmware ignores the rest "
                      f"(it reads {key} as {value!r}); shorten the line.")
        if indented:
            self.warn(f"{where}: the documentation does not say leading spaces are ignored; "
                      f"start the {key} line at the first column.")
        if re.search(r"\s#", value):
            self.warn(f"{where}: '#' starts a comment only at the beginning of a line, so {key} is "
                      f"{value!r}; move the comment to a line of its own.")
        if ok is None and any(runtime_filter(tok) for tok in self.state.values()):
            self.warn(f"{where}: {key} is under {self.label}, which depends on the board at boot time "
                      "(bootcheck assumes it does not apply); move it under [all] or a model filter.")
        elif ok is False and why == "none" and self.none_then_filter:
            self.warn(f"{where}: {key} follows [none] and a later filter without [all] in between; the "
                      "documentation does not say whether that filter lifts [none] (bootcheck assumes not): "
                      "put [all] before it.")

    def line(self, raw: str, where: str, depth: int) -> None:
        text = raw[:-1] if raw.endswith("\r") else raw   # CRLF files: the CR is not part of the line
        raw_len = len(text)
        text = text[:LINE_LIMIT]
        stripped = text.strip()
        # Only '#' at the start of a line makes a comment (config.txt format).
        if not stripped or stripped.startswith("#"):
            return
        indented = text[0].isspace()
        if stripped.startswith("["):
            self.section_line(stripped, where)
            return
        word, rest = (re.split(r"\s+", stripped, maxsplit=1) + [""])[:2]
        if word in ("include", "initramfs"):
            # The two directives written without '=' ("include FILE",
            # "initramfs FILE ADDR": Boot options / Advanced features).
            self.setting(word, rest.strip(), where, indented, raw_len)
            if word == "include":
                self.include(rest.strip(), where, depth)
            return
        key, eq, value = stripped.partition("=")
        if key.strip() in ("initramfs", "include"):
            # Boot options: initramfs has its own syntax, FILE and ADDR after a
            # space and no '='; include is documented as "include FILE" too.
            tail = " followkernel" if key.strip() == "initramfs" else ""
            self.warn(f"{where}: {key.strip()} takes no '=' and this line is not read as one; "
                      f"write {key.strip()} {value.strip()}{tail}.")
            return
        if not eq:
            if word in BOOT_KEYS:
                self.warn(f"{where}: {stripped!r} has no '='; write {word}=VALUE.")
            return
        if key.strip() in BOOT_KEYS and (key != key.strip() or value[:1].isspace()):
            # Spaces around '=' are not ignored, so "kernel = x" sets a key
            # named "kernel " that nothing reads.
            self.warn(f"{where}: spaces around '=' are not ignored, so this line does not set "
                      f"{key.strip()}; write {key.strip()}={value.strip()}.")
        elif key not in BOOT_KEYS and key.lower() in BOOT_KEYS:
            self.warn(f"{where}: property names are case-sensitive, so {key!r} is not read; "
                      f"write {key.lower()}={value}.")
        self.setting(key, value.rstrip(), where, indented, raw_len)

    def include(self, name: str, where: str, depth: int) -> None:
        ok, _ = self.truth()
        path = boot_path(name)
        if not name or path is None:
            self.warn(f"{where}: include needs a file name on the boot partition.")
            return
        if ok is not True:
            # The docs describe include only as inserting the other file's
            # content; whether one under a failing filter is read is not said.
            data = self.read(path, where)
            if data is not None and any(_boot_key(ln) for ln in data.decode("latin-1").split("\n")):
                self.warn(f"{where}: include {name} is under {self.label}; bootcheck assumes the firmware "
                          "does not read it, which the documentation does not settle: move it under [all].")
            return
        if path in self.stack:
            self.warn(f"{where}: include {name} includes a file already being read; remove the loop.")
            return
        if depth >= MAX_INCLUDE_DEPTH:
            self.warn(f"{where}: includes nest deeper than {MAX_INCLUDE_DEPTH}; flatten them.")
            return
        if not self.read_file(path, depth + 1, where) and not self.cut:
            self.warn(f"{where}: include {name} names a file that is not on the boot partition; "
                      "create it or remove the line.")

    def read_file(self, path: str, depth: int = 0, where: str = "") -> bool:
        data = self.read(path, where or path)
        if data is None:
            return False
        self.encoding(path, data)
        # The firmware sees bytes; latin-1 maps each byte to one character,
        # so no file can fail to decode.
        text = data.decode("latin-1")
        self.out.files_read.append(path)
        self.stack.append(path)
        for n, raw in enumerate(text.split("\n"), 1):
            if self.cut:
                break
            self.lines_read += 1
            if self.lines_read > MAX_LINES_READ:
                self.stop(f"{path}:{n}", f"this configuration has more than {MAX_LINES_READ} lines in all "
                                         "(with its includes)")
                break
            self.line(raw, f"{path}:{n}", depth)
        self.stack.pop()
        return True


    def encoding(self, path: str, data: bytes) -> None:
        """The format is plain text, one property=value a line (What is
        config.txt, File format); nothing documents a byte-order mark, UTF-16
        or binary content.  The firmware compares bytes, so bootcheck reads
        such a file as bytes too -- a BOM glued to the first key, NULs between
        the letters of every key -- and says so, since the settings it loses
        would otherwise vanish without a word."""
        if data[:2] in (b"\xff\xfe", b"\xfe\xff") or _utf16_like(data):
            hits = _boot_lines(data.decode("utf-16", "replace") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else
                               data.replace(b"\0", b"").decode("latin-1"))
            self.warn(f"{path} is UTF-16 text, but the firmware reads 8-bit text, so it sees none of its settings"
                      f"{_lost(hits)}: save it as plain text (ASCII or UTF-8 without a byte-order mark).")
        elif b"\0" in data or _binary_like(data):
            self.warn(f"{path} is not a text file (it holds NUL or other control bytes), so the firmware finds "
                      "no usable settings in it: restore it from a backup or write it anew as plain text.")
        elif data.startswith(b"\xef\xbb\xbf"):
            first = data[3:].split(b"\n", 1)[0].decode("latin-1").strip()
            if _boot_key(first) or "=" in first:
                self.warn(f"{path} starts with a UTF-8 byte-order mark, which is not part of the documented format: "
                          f"the firmware reads it as part of the first line, so {first[:60]!r} on {path}:1 is "
                          "likely not applied; save the file as UTF-8 without a byte-order mark (or ASCII).")


def _utf16_like(data: bytes) -> bool:
    """UTF-16 without a BOM: ASCII text with every other byte NUL."""
    sample = data[:512]
    return len(sample) >= 8 and (sample[1::2].count(0) >= len(sample) // 2 * 0.9
                                 or sample[0::2].count(0) >= len(sample) // 2 * 0.9)


def _binary_like(data: bytes) -> bool:
    """More than a few control bytes other than tab, CR, LF and form feed, for
    the size of the text without its CRs: a file saved with CRLF line ends is
    judged as its LF twin (the CRs made the allowance grow with the lines)."""
    sample = data[:8192].replace(b"\r", b"")[:4096]
    controls = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13))
    return controls > max(4, len(sample) // 100)


def _boot_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().split("=", 1)[0].strip() in ("kernel", "os_prefix",
                                                                                          "arm_64bit", "initramfs")]


def _lost(lines: list[str]) -> str:
    return f", {', '.join(lines[:3])}{' ...' if len(lines) > 3 else ''} among them" if lines else ""


def _boot_key(line: str) -> bool:
    s = line.strip()
    word = re.split(r"[\s=]", s, maxsplit=1)[0] if s else ""
    return word in BOOT_KEYS or s.startswith("[")


def parse(files: BootFiles, name: str, model: PiModel, tryboot: bool = False) -> FirmwareConfig | None:
    """Read `name` (config.txt or tryboot.txt) and the files it includes as
    the firmware would for `model` (with the tryboot flag set or not); None
    when `name` does not exist."""
    r = _Reader(files, model, tryboot)
    return r.out if r.read_file(name) else None
