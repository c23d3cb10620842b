"""Which kernel, device tree, initramfs and command line a Raspberry Pi boots.

A model of the firmware's boot-file selection (the firmware itself is closed;
this module *simulates* it from its documentation), used by `rtforge
bootcheck` and by deploy to check a tryboot.txt before rebooting into it:

    choice = resolve(Path("/media/me/bootfs"), "pi4")            # normal boot
    choice = resolve(boot, "pi4", tryboot=True)                  # after reboot '0 tryboot'
    choice = resolve_text(proposed_tryboot_txt, boot, "pi4", tryboot=True)   # not written yet
    check(boot, "pi4") -> {"normal": {...}, "tryboot": {...}}

`boot` is a directory or any object with ``read(name, limit)`` and
``exists(name)`` (see ``bootparse.BootFiles``), so a remote partition can be
checked through a transport.  Rules and their documentation sources are in
``bootparse`` (reading the files) and in the comments below (choosing files).
"""

from __future__ import annotations

import posixpath
import re
import struct
import zlib
from dataclasses import dataclass, field

from ...errors import UserError
from .bootparse import BootFiles, DirFiles, FirmwareConfig, OverlayFiles, as_files, boot_path, parse
from .pimodels import PiModel, known_kernel_bits, pi_model, soc_kernel, standard_initramfs

__all__ = ["BootChoice", "BootFiles", "DirFiles", "OverlayFiles", "check", "get_model", "resolve", "resolve_text"]

# The model facts (filters, default kernels, arm_64bit defaults, dtbs) are
# data: rtforge/data/pi_models.toml, read through pimodels.py.


def get_model(model: str | PiModel) -> PiModel:
    """A model by name ("pi4", as bootcheck's --model), or the model itself."""
    return model if isinstance(model, PiModel) else pi_model(model)


@dataclass
class BootChoice:
    """What the firmware would load.  Paths are relative to the boot
    partition, None when there is none; cmdline is the command line text."""
    model: str
    tryboot: bool
    config: str                 # the file the firmware reads: config.txt or tryboot.txt
    kernel: str | None = None
    dtb: str | None = None
    initramfs: str | None = None
    cmdline: str | None = None
    cmdline_file: str | None = None
    arm_64bit: bool = False
    os_prefix: str = ""         # the prefix in effect ("" when none or ignored)
    overlays: str = "overlays/"  # the folder dtoverlay= files are loaded from
    reasons: dict = field(default_factory=dict)    # field -> which line decided, or which default
    warnings: list = field(default_factory=list)   # each says what to change

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "dtb": self.dtb, "initramfs": self.initramfs,
                "cmdline": self.cmdline, "overlays": self.overlays, "warnings": list(self.warnings)}


def image_arch(data: bytes | None) -> str | None:
    """'arm64' or 'arm' from a kernel image's header, None if unrecognised.
    arm64 Image: magic "ARM\\x64" at offset 0x38 (Documentation/arch/arm64/
    booting.rst); 32-bit zImage: 0x016F2818 at 0x24 (Documentation/arch/arm/
    booting.rst).  The firmware also accepts a gzipped arm64 Image (Boot
    options, arm_64bit note), so a gzip stream is opened far enough to see."""
    if not data:
        return None
    if data[:2] == b"\x1f\x8b":
        try:
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, 64)
        except zlib.error:
            return None
    if len(data) >= 64 and data[56:60] == b"ARM\x64":
        return "arm64"
    if len(data) >= 0x28 and struct.unpack_from("<I", data, 0x24)[0] == 0x016F2818:
        return "arm"
    return None


def name_arch(name: str) -> str | None:
    """The architecture a kernel file name conventionally means (the default
    names of Boot options, zImage and arm64's Image), None if it says nothing."""
    base = posixpath.basename(name).lower()
    if base == "kernel.img" or base.startswith("kernel7") or "zimage" in base:
        return "arm"
    if base.startswith(("kernel8", "kernel_2712", "image")):
        return "arm64"
    return None


def looks_rt(name: str) -> bool:
    """A PREEMPT_RT build by its name: kernel8_rt.img, kernel8-rt.img, 6.6.y-rt12."""
    return re.search(r"(?<![a-z0-9])rt(?![a-z])|preempt", name.lower()) is not None


def _int(text: str) -> int | None:
    m = re.match(r"\s*([+-]?(?:0x[0-9a-f]+|\d+))", text, re.I)  # leading integer, as strtol reads it
    return int(m.group(1), 0) if m else None


class _Resolver:
    def __init__(self, files: BootFiles, m: PiModel, parsed: FirmwareConfig, c: BootChoice):
        self.files, self.m, self.p, self.c = files, m, parsed, c

    def warn(self, msg: str) -> None:
        if msg not in self.c.warnings:
            self.c.warnings.append(msg)

    def under(self, prefix: str, name: str) -> str | None:
        # A file name starting with '/' is taken from the partition root and
        # skips every prefix (Boot options, os_prefix note).
        return boot_path(name if name.startswith("/") else prefix + name)

    def present(self, path: str | None) -> bool:
        return path is not None and self.files.exists(path)

    def run(self) -> BootChoice:
        self.arm64()
        names = self.kernel_names()
        self.c.reasons["arm_64bit"] = self.why64
        prefix = self.prefix(names)
        self.kernel(names, prefix)
        self.dtb(prefix)
        self.initramfs(prefix)
        self.cmdline(prefix)
        self.overlays()
        self.bitness()
        self.soc_only()
        self.misplaced()
        return self.c

    def arm64(self) -> None:
        m, s = self.m, self.p.last("arm_64bit")
        v = _int(s.value) if s is not None else None
        if s is not None and v is None:
            self.warn(f"{s.where}: arm_64bit={s.value} is not a number; write arm_64bit=1 or arm_64bit=0.")
        said = s if v is not None else None     # the line that decides: one with a number
        self.explicit = None if v is None else v != 0
        if m.arm64 == "only":
            # The Pi 5 family runs 64-bit kernels only and has no arm_64bit
            # setting any more (Boot options, arm_64bit note).
            if said is not None and not self.explicit:
                self.warn(f"{said.where}: arm_64bit=0 has no effect on a {m.name}, which only runs 64-bit kernels; "
                          "remove the line.")
            self.c.arm_64bit, self.why64 = True, f"a {m.name} only runs 64-bit kernels"
        elif said is not None:
            self.c.arm_64bit, self.why64 = bool(self.explicit), f"arm_64bit={said.value} ({said.origin()})"
        else:
            on = m.arm_64bit_default
            self.c.arm_64bit = on
            self.why64 = f"arm_64bit defaults to {int(on)} on a {m.name}"
        if m.arm64 == "no" and said is not None and self.explicit:
            # ARMv6 has no 64-bit mode (Boot options, arm_64bit note lists the
            # boards a 64-bit kernel works on).
            self.warn(f"{said.where}: a {m.name} cannot run a 64-bit kernel; remove arm_64bit=1.")
            self.c.arm_64bit, self.why64 = False, f"a {m.name} only runs 32-bit kernels"
        elif m.arm64 == "bcm2837-revision" and self.explicit:
            self.warn_revision()

    def warn_revision(self) -> None:
        """[pi2] covers two boards: the 64-bit kernel works on the 2B rev 1.2
        (BCM2837) only (Boot options, arm_64bit note).  Which one it is, the
        files cannot say: a warning, never a refusal."""
        self.warn(f"a {self.m.name} runs a 64-bit kernel only if it is the 2B rev 1.2 (BCM2837); on a rev 1.0 or "
                  "1.1 (BCM2836) it does not boot: check the board (/proc/device-tree/model) or choose a 32-bit "
                  f"kernel such as {self.m.kernel32}.")

    def kernel_names(self) -> list[str]:
        m, k = self.m, self.p.last("kernel")
        if k is not None and not k.value.strip():
            self.warn(f"{k.where}: kernel= names no file; write kernel=FILE or remove the line.")
            k = None
        self.kset = k
        if k is not None:
            bits = known_kernel_bits(k.value)
            known = None if bits is None else bits == 64
            if known is not None and self.explicit is None and m.arm64 in ("yes", "bcm2837-revision") \
                    and known != self.c.arm_64bit:
                self.c.arm_64bit = known
                self.why64 = f"the firmware sets arm_64bit to {int(known)} for the known name {k.value}"
                if known and m.arm64 == "bcm2837-revision":
                    self.warn_revision()
            return [k.value]
        if m.kernel32 is None or (self.c.arm_64bit and m.kernel64):
            # (a model without a 32-bit kernel runs 64-bit only and names its kernels: pimodels checks it)
            return list(m.kernel64)
        return [m.kernel32]

    def prefix(self, names: list[str]) -> str:
        s = self.p.last("os_prefix")
        if s is None or not s.value:
            return ""
        pre, dtb = s.value, self.dtb_name()
        # The firmware drops the prefix unless both the kernel and the .dtb
        # it expects exist under it (Boot options, os_prefix).
        kpaths = [self.under(pre, n) for n in names]
        dpath = self.under(pre, dtb)
        missing = ([kpaths[0] or names[0]] if not any(self.present(p) for p in kpaths) else []) \
            + ([dpath or dtb] if not self.present(dpath) else [])
        if not pre.endswith("/") and all(self.present(self.under(pre + "/", n)) for n in (names[0], dtb)):
            self.warn(f"{s.where}: os_prefix={pre} has no trailing '/', so the firmware looks for "
                      f"{pre}{names[0]} rather than {pre}/{names[0]}; write os_prefix={pre}/.")
        if missing:
            self.warn(f"{s.where}: os_prefix={pre} is ignored because {' and '.join(missing)} "
                      f"{'is' if len(missing) == 1 else 'are'} missing, so the {self.m.name} boots the files at "
                      f"the top of the boot partition instead; copy {' and '.join(missing)} there or fix os_prefix.")
            return ""
        self.c.os_prefix, self.prefix_at = pre, s
        return pre

    def overlays(self) -> None:
        """Where dtoverlay= files come from: ${overlay_prefix} (default
        overlays/), under os_prefix only when ${os_prefix}${overlay_prefix}README
        exists; otherwise the firmware falls back to ${overlay_prefix} itself
        (Boot options, overlay_prefix)."""
        o = self.p.last("overlay_prefix")
        ovp = o.value if o is not None and o.value else "overlays/"
        said = f"overlay_prefix={ovp} ({o.origin()})" if o is not None and o.value else "default overlay_prefix"
        pre = self.c.os_prefix
        if not pre:
            self.c.overlays, self.c.reasons["overlays"] = ovp, said
            return
        if self.files.exists(boot_path(pre + ovp + "README") or ""):
            self.c.overlays = pre + ovp
            self.c.reasons["overlays"] = f"{said}{self.via_prefix(ovp)}, whose README exists"
            return
        self.c.overlays = ovp
        self.c.reasons["overlays"] = f"{said}: {pre}{ovp}README is missing, so not under os_prefix={pre}"
        if not ovp.startswith(pre):  # the shared overlays, not the ones of the kernel under os_prefix
            self.warn(f"{self.prefix_at.where}: {pre}{ovp}README is missing, so overlays load from the shared "
                      f"{ovp} (built for another kernel); copy the kernel's overlays and their README into "
                      f"{pre}{ovp}.")

    def via_prefix(self, name: str) -> str:
        if not self.c.os_prefix or name.startswith("/"):
            return ""
        return f", under os_prefix={self.c.os_prefix} ({self.prefix_at.origin()})"

    def kernel(self, names: list[str], prefix: str) -> None:
        m, c, k = self.m, self.c, self.kset
        paths = [self.under(prefix, n) for n in names]
        idx = next((i for i, p in enumerate(paths) if self.present(p)), 0)
        c.kernel, self.kname = paths[idx], names[idx]
        if k is not None:
            c.reasons["kernel"] = f"kernel={k.value} ({k.origin()}){self.via_prefix(k.value)}"
        else:
            fallback = f", because {paths[0]} is missing" if idx else ""
            c.reasons["kernel"] = f"default for a {m.name} ({self.why64}){fallback}{self.via_prefix(names[idx])}"
        if c.kernel is None:
            assert k is not None, "a default kernel name is a plain file name, and os_prefix is kept only " \
                "when a kernel under it is present"
            self.warn(f"{k.where}: kernel={k.value} points outside the boot partition; name a file on it.")
        elif not self.present(c.kernel):
            what = f"kernel={k.value} ({k.where}) names" if k else f"the default kernel for a {m.name} is"
            self.warn(f"{what} {c.kernel}, which is not on the boot partition, so the {m.name} would not boot; "
                      f"copy the kernel there as {c.kernel}" + (" or fix the kernel= line." if k else "."))

    def dtb_name(self) -> str:
        s = self.p.last("device_tree")
        return s.value if s is not None and s.value else self.m.dtb

    def dtb(self, prefix: str) -> None:
        s, name = self.p.last("device_tree"), self.dtb_name()
        self.c.dtb = self.under(prefix, name)
        src = f"device_tree={name} ({s.origin()})" if s is not None and s.value else f"default for a {self.m.name}"
        self.c.reasons["dtb"] = src + self.via_prefix(name)
        if not self.present(self.c.dtb):
            self.warn(f"the device tree {self.c.dtb or name} is not on the boot partition, so the kernel gets no "
                      f"usable hardware description; copy {name} from the kernel build there.")

    def initramfs(self, prefix: str) -> None:
        c = self.c
        explicit = [s for s in self.p.applied() if s.key in ("initramfs", "ramfsfile")]
        if explicit:
            s = explicit[-1]
            parts = s.value.split()
            names = [n for n in (parts[0] if parts else "").split(",") if n]
            if not names:
                self.warn(f"{s.where}: {s.key} names no file; write initramfs FILE followkernel.")
                return
            if s.key == "initramfs" and len(parts) < 2:
                self.warn(f"{s.where}: initramfs {parts[0]} has no load address; "
                          f"write initramfs {parts[0]} followkernel.")
            paths = [self.under(prefix, n) for n in names]
            c.initramfs = ",".join(p or n for p, n in zip(paths, names))
            c.reasons["initramfs"] = f"{s.key} {s.value} ({s.origin()}){self.via_prefix(names[0])}"
            for p, n in zip(paths, names):
                if not self.present(p):
                    self.warn(f"{s.where}: the initramfs {p or n} is not on the boot partition; copy it there "
                              f"or remove the {s.key} line.")
            return
        auto = self.p.last("auto_initramfs")
        if auto is None or not _int(auto.value):
            c.reasons["initramfs"] = "no initramfs line and auto_initramfs is off"
            return
        base, folder = posixpath.basename(self.kname), posixpath.dirname(self.kname.lstrip("/"))
        std = standard_initramfs(base)
        # For other kernel names the documentation gives no rule; newer
        # firmware derives the name from the kernel's (kernel -> initramfs,
        # no .img), older firmware loads nothing, so never rely on it.
        guess = std or (base.replace("kernel", "initramfs", 1).removesuffix(".img") if "kernel" in base else None)
        path = self.under(prefix, posixpath.join("/" if self.kname.startswith("/") else "", folder, guess)) \
            if guess else None
        if self.present(path):
            c.initramfs = path
            c.reasons["initramfs"] = f"auto_initramfs={auto.value} ({auto.origin()}) with {base}"
            if not std:
                self.warn(f"{auto.where}: auto_initramfs only has documented names for the standard kernels, and "
                          f"older firmware would load no initramfs with {base}; add "
                          f"initramfs {guess} followkernel.")
        else:
            c.reasons["initramfs"] = f"auto_initramfs={auto.value} ({auto.origin()}) found none for {base}"
            if not std:
                self.warn(f"{auto.where}: auto_initramfs finds no initramfs for {base}, so it boots without one; "
                          "if the kernel needs one, add initramfs FILE followkernel.")

    def cmdline(self, prefix: str) -> None:
        c, s = self.c, self.p.last("cmdline")
        name = s.value if s is not None and s.value else "cmdline.txt"
        c.cmdline_file = self.under(prefix, name)
        src = f"cmdline={name} ({s.origin()})" if s is not None and s.value else "the default cmdline.txt"
        c.reasons["cmdline"] = src + self.via_prefix(name)
        data = self.files.read(c.cmdline_file) if c.cmdline_file else None
        if data is None:
            hint = f"; with os_prefix={prefix} the firmware reads it from there" if self.via_prefix(name) else ""
            self.warn(f"{c.cmdline_file or name} is missing, so the kernel gets no command line from it "
                      f"(no root=){hint}: copy cmdline.txt there.")
            c.cmdline_file = None
            return
        lines = [ln.strip() for ln in data.decode("utf-8", "replace").split("\n") if ln.strip()]
        c.cmdline = lines[0] if lines else ""
        if not lines:
            self.warn(f"{c.cmdline_file} is empty, so the kernel gets no root=; write the command line into it.")
        if len(lines) > 1:
            # The command line is one line (Raspberry Pi documentation,
            # kernel command line); what the firmware does with more is not said.
            self.warn(f"{c.cmdline_file} has {len(lines)} lines; the kernel command line must be a single line: "
                      "join them with spaces.")

    def bitness(self) -> None:
        c, m, kernel = self.c, self.m, self.c.kernel
        if kernel is None or not self.files.exists(kernel):
            return
        arch, how = image_arch(self.files.read(kernel, 65536)), "its header"
        if arch is None:
            arch, how = name_arch(self.kname), "its name"
            if arch == "arm" and self.explicit:
                # distributions boot 64-bit kernels named kernel.img with arm_64bit=1: a name says less than the
                # line the user wrote, and only a zImage header proves a 32-bit kernel
                arch = None
        if arch == "arm" and c.arm_64bit:
            fix = f"choose {m.kernel64[0]}" if m.arm64 == "only" else "set arm_64bit=0 or choose a 64-bit kernel"
            self.warn(f"{c.kernel} is a 32-bit kernel (by {how}) but {self.why64}, so the firmware starts it in "
                      f"64-bit mode and it cannot boot; {fix}.")
        elif arch == "arm64" and not c.arm_64bit:
            if m.arm64 == "no":
                self.warn(f"{c.kernel} is a 64-bit kernel (by {how}) and a {m.name} only runs 32-bit kernels; "
                          f"choose a 32-bit kernel such as {m.kernel32}.")
            else:
                self.warn(f"{c.kernel} is a 64-bit kernel (by {how}) but {self.why64}, so the firmware starts it in "
                          "32-bit mode and it cannot boot; add arm_64bit=1.")

    def soc_only(self) -> None:
        """A kernel named for another SoC (kernel_2712*: the Pi 5's) cannot
        boot here, whatever its header says."""
        only = soc_kernel(posixpath.basename(self.c.kernel or ""))
        if only and self.m.soc not in only[0]:
            default = self.m.kernel64[0] if self.c.arm_64bit and self.m.kernel64 else self.m.kernel32
            self.warn(f"{self.c.kernel} is a kernel for the {', '.join(s.upper() for s in only[0])} only ({only[1]}), "
                      f"so a {self.m.name} ({self.m.soc.upper()}) cannot boot it; choose a kernel built for it, "
                      f"such as {default}.")

    def misplaced(self) -> None:
        """The most common complaint: an RT kernel installed, but the lines
        that select it sit under a filter this model does not pass."""
        if looks_rt(self.c.kernel or ""):
            return
        for s in self.p.settings:
            if s.key not in ("kernel", "os_prefix") or s.applies is not False or s.why_not != "model":
                continue
            # RT by its name, or the kernel= of a config that has none for
            # this model although the file it names was installed.
            installed = s.key == "kernel" and self.kset is None and self.present(boot_path(s.value))
            if looks_rt(s.value) or installed:
                self.warn(f"{s.where}: {s.key}={s.value} is under {s.section}, which a {self.m.name} does not "
                          f"read, so it boots {self.c.kernel} instead; if the {self.m.name} should boot it, "
                          f"move the line under [{self.m.name}] or [all].")


def resolve(boot, model: str | PiModel, tryboot: bool = False) -> BootChoice:
    """What `model` would boot from `boot` (a directory or a BootFiles), in
    normal mode or after `reboot '0 tryboot'`."""
    m, files = get_model(model), as_files(boot)
    name = "tryboot.txt" if tryboot else "config.txt"
    c = BootChoice(model=m.name, tryboot=tryboot, config=name)
    parsed = parse(files, name, m, tryboot)
    if parsed is None:
        # With the tryboot flag set the firmware loads tryboot.txt in place of
        # config.txt (EEPROM boot flow, tryboot); nothing says it falls back
        # to config.txt when tryboot.txt is missing, so assume defaults.
        c.warnings.append(f"{name} is missing, so the firmware reads no configuration and boots its defaults; "
                          + ("write tryboot.txt (config.txt plus the lines that select the new kernel) before "
                             "reboot '0 tryboot'." if tryboot else "create config.txt."))
        parsed = FirmwareConfig()
    c.warnings.extend(parsed.warnings)
    _Resolver(files, m, parsed, c).run()
    if tryboot:
        _tryboot_sections_in_config(files, m, parsed, c)
    return c


def _tryboot_sections_in_config(files: BootFiles, m: PiModel, parsed: FirmwareConfig, c: BootChoice) -> None:
    """[tryboot] lines in config.txt are dead: in tryboot mode the firmware
    reads tryboot.txt *instead of* config.txt (EEPROM boot flow, tryboot),
    unless tryboot.txt includes config.txt."""
    if "config.txt" in parsed.files_read:
        return
    cfg = parse(files, "config.txt", m, True)
    for s in cfg.settings if cfg else []:
        if any(t == "tryboot" for t, _ in s.filters) and s.key in ("kernel", "os_prefix", "arm_64bit", "cmdline",
                                                                     "initramfs", "device_tree", "include"):
            c.warnings.append(f"{s.where}: {s.key}={s.value} is under {s.section} in config.txt, which a tryboot "
                              "reboot never reads (it reads tryboot.txt instead); put the line in tryboot.txt.")
            return


def resolve_text(config_text: str, boot, model: str | PiModel, tryboot: bool = False) -> BootChoice:
    """Like resolve, with config.txt (or tryboot.txt when `tryboot`) replaced
    by `config_text`: check a file before writing it to the board."""
    name = "tryboot.txt" if tryboot else "config.txt"
    return resolve(OverlayFiles(as_files(boot), {name: config_text}), model, tryboot)


def check(boot, model: str) -> dict:
    """{"normal": ..., "tryboot": ...}, each BootChoice.to_dict()."""
    get_model(model)
    files = as_files(boot)
    if not files.exists("config.txt"):
        raise UserError(f"{boot} has no config.txt: give the mounted boot partition "
                        "(e.g. /media/$USER/bootfs or /boot/firmware)")
    return {"normal": resolve(files, model).to_dict(), "tryboot": resolve(files, model, tryboot=True).to_dict()}
