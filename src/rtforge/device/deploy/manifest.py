"""The bundle manifest: what a kernel bundle says it is, and the questions
asked of it -- in one place.

`rtforge kernel build` writes it (kernel/package.py), deploy reads it from a
bundle (bundle.py) and copies it next to the kernel on the board as
rtforge.json (pibundle.py, read back by pikernels.py), the boot test holds
QEMU to it (kernel/boottest.py).  The answers everyone shares are here:

    rt_marker / uname_v_marker   the word `uname -v` shows for a kernel built
                                 with a .config (the manifest's uname_v_marker;
                                 a .deb's or Raspberry Pi's package's /boot/config)
    fits                         this Pi is one the kernel was built for
    kernel_problems              the booted kernel is the one described
    installed                    an installed kernel's release, from its rtforge.json

Fields: board, arch, machines (uname -m), models (device-tree model prefixes),
pis (Pi model names, pi_models.toml), kernelrelease, image, uname_v_marker,
files ({path: sha256} of every other file), and what the build adds (flavour,
dtbs, overlays, config_sha256, emulated, user_cpus, source_id, headers, ...).
A manifest may come from anywhere and is checked as hostile input before a
bundle is used (check_manifest): every path it names is a plain relative
path, listed and so hashed in `files` (the headers package included); every
string that reaches a file or a command on the board is a plain name of one
line; the RT marker is one rtforge writes (PREEMPT_RT, or RT), never empty.
The manifest's own bytes are read once, and those bytes are what deploy
installs as rtforge.json, checked there by their sha256 (bundle.py).

Manifest history (bump MANIFEST_VERSION and add a line when a field changes):
  1  2026-11  first version.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from ... import __version__
from ...errors import UserError
from ...paths import resolved
from ..firmware.pimodels import model_for_dt
from ..transport.transport import sha256_file

MANIFEST_VERSION = 1
REQUIRED = ("board", "arch", "machines", "models", "kernelrelease", "image", "uname_v_marker", "files")
# A name used as one path component on the host and the board (image, dtb,
# release: lib/modules/<release>, the os_prefix folder).
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+~-]{0,127}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# Free text that is shown and compared (device-tree models, Pi names): printable ASCII, one line.
_LINE_RE = re.compile(r"[ -~]{1,128}")
RT_MARKERS = ("PREEMPT_RT", "RT")      # what rt_marker() gives, all a manifest may say
MAX_MANIFEST_BYTES = 16 << 20
_CONFIG_LINE = re.compile(r"^CONFIG_([A-Za-z0-9_]+)=(.*)$", re.M)


def rt_marker(config: Mapping[str, str]) -> str | None:
    """The word `uname -v` shows for a kernel built with this configuration
    ({SYMBOL: value}): PREEMPT_RT for mainline RT and RT patches since 5.3,
    RT for the older CONFIG_PREEMPT_RT_FULL patches; None when it is not RT."""
    if config.get("PREEMPT_RT") == "y":
        return "PREEMPT_RT"
    if config.get("PREEMPT_RT_FULL") == "y":
        return "RT"
    return None


def uname_v_marker(config_text: str) -> str | None:
    """rt_marker of a .config's text (a package's /boot/config-<release>)."""
    return rt_marker({m[1]: m[2] for m in _CONFIG_LINE.finditer(config_text)})


def fits(dt_model: str | None, pis: Sequence[str], models: Sequence[str] = ()) -> bool:
    """/proc/device-tree/model (with or without ' Rev x.y') names one of these
    Pis: by model name when they are named (pi_models.toml decides), else by
    the device-tree prefixes older bundles list."""
    model = (dt_model or "").replace("\0", "").strip()
    if not model:
        return False
    if pis:
        try:
            return model_for_dt(model).name in pis
        except UserError:
            return False
    return any(model.startswith(m) for m in models)


def has_marker(uname_v: str, marker: str) -> bool:
    """uname -v names the RT marker: a word of it, or the two words "PREEMPT RT"
    of the RT patches before 5.x."""
    tokens = uname_v.split()
    return marker in tokens or (marker in ("RT", "PREEMPT_RT") and
                                any(a == "PREEMPT" and b == "RT" for a, b in zip(tokens, tokens[1:])))


def kernel_problems(marker: str | None, uname_v: str, realtime: int | str | None, *,
                    release: str | None = None, uname_r: str | None = None,
                    config_from: str | None = None, config_rt: list[str] | None = None) -> list[str]:
    """What says a booted kernel is not the one described -- the one rule for
    a deploy's verify, the boot test and `kernel.rtcheck`: uname -v without
    the RT marker, /sys/kernel/realtime other than 1 (None: absent, as on
    mainline), another uname -r (when a release is given), and a running
    configuration (when one was read: config_from) without
    CONFIG_PREEMPT_RT=y (CONFIG_PREEMPT_RT_FULL=y before 5.3)."""
    problems = []
    if marker and not has_marker(uname_v, marker):
        problems.append(f"uname -v lacks {marker} ({uname_v})")
    if realtime is not None and str(realtime) != "1":
        problems.append(f"/sys/kernel/realtime is {realtime}")
    if release is not None and uname_r != release:
        problems.append(f"uname -r is {uname_r}, not {release}")
    if marker and config_from is not None and not rt_configured(config_rt or []):
        problems.append(f"its configuration ({config_from}) has {config_line(config_rt or [])}")
    return problems


def rt_configured(lines: list[str]) -> bool:
    return any(re.fullmatch(r"CONFIG_PREEMPT_RT(_FULL)?=y", line.strip()) for line in lines)


def config_line(lines: list[str]) -> str:
    """The configuration's PREEMPT_RT line to show (=y first)."""
    on = [line for line in lines if re.fullmatch(r"CONFIG_PREEMPT_RT(_FULL)?=y", line.strip())]
    rest = [line for line in lines if line.strip()]
    return (on or rest or ["no PREEMPT_RT line"])[0].strip()


def installed(text: str) -> tuple[str, str] | None:
    """(release, board) that an installed kernel's rtforge.json names; None
    when it is damaged (such a kernel is not shown, and never removed)."""
    try:
        m = json.loads(text)
        return str(m["kernelrelease"]), str(m.get("board", "?"))
    except (ValueError, KeyError, TypeError):
        return None


def write_manifest(root: Path, **fields: Any) -> dict[str, Any]:
    """Write root/manifest.json with the sha256 of every file under root."""
    files = {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != "manifest.json"}
    manifest = {"manifest_version": MANIFEST_VERSION, "rtforge_version": __version__, **fields, "files": files}
    missing = [k for k in REQUIRED if k not in manifest]
    if missing:
        raise ValueError(f"manifest lacks {missing}")
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def read_manifest(path: Path, root: Path) -> Any:
    """root/manifest.json, parsed (a regular file, not followed through a
    link, bounded); `path` is the bundle as the user named it, for messages."""
    return parse_manifest(path, read_manifest_bytes(path, root))


def read_manifest_bytes(path: Path, root: Path) -> bytes:
    """root/manifest.json's bytes, read once: what is checked is what is installed."""
    where = root / "manifest.json"
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UserError(f"{path} has no manifest.json: it is not a bundle made by `rtforge kernel build`") from None
    except OSError as e:
        raise UserError(f"{path}/manifest.json cannot be read ({e.strerror}; a symbolic link is not followed): "
                        "rebuild the bundle") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path}/manifest.json is not a regular file: rebuild the bundle")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise UserError(f"{path}/manifest.json is over {MAX_MANIFEST_BYTES >> 20} MB, not a manifest: "
                        "rebuild the bundle")
    return data


def parse_manifest(path: Path, data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{path}/manifest.json is not UTF-8 text (byte {e.start}): rebuild the bundle") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}/manifest.json:{e.lineno}: not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:
        raise UserError(f"{path}/manifest.json is not a manifest ({type(e).__name__}): rebuild the bundle") from None


def _safe_rel(rel: Any) -> bool:
    """A plain relative path inside the bundle: no '..', no '.', no empty part."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel:
        return False
    parts = PurePosixPath(rel).parts
    return not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts) and "/".join(parts) == rel


def check_manifest(path: Path, root: Path, m: Any) -> None:
    """UserError unless m is a manifest whose every path stays inside root."""
    def bad(what: str) -> UserError:
        return UserError(f"{path}/manifest.json {what}: rebuild the bundle with `rtforge kernel build`")
    if not isinstance(m, dict):
        raise bad(f"holds {type(m).__name__}, not a manifest object")
    version = m.get("manifest_version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise bad(f"has manifest_version {version!r}, not a number")
    if version > MANIFEST_VERSION:
        raise UserError(f"{path} was made by a newer rtforge (manifest {version}); upgrade rtforge")
    missing = [k for k in REQUIRED if k not in m]
    if missing:
        raise UserError(f"{path}/manifest.json lacks {', '.join(missing)}: rebuild the bundle")
    _check_fields(m, bad)
    _check_files(root, m["files"], bad)
    _check_headers(m, bad)
    if f"boot/{m['image']}" not in m["files"]:
        raise bad(f"names the kernel image {m['image']} but does not list boot/{m['image']}")
    _check_machines(root, m, bad)


def _check_fields(m: dict, bad: Callable[[str], UserError]) -> None:
    """A manifest is hostile input: every string that reaches a file or a
    command on the board (the board's name and the release in config.txt's
    block, the image in kernel=, the headers package for apt) is one line of
    a known alphabet, and the RT marker is one rtforge writes."""
    for key in ("board", "arch", "kernelrelease", "image", *(k for k in ("flavour",) if k in m)):
        if not isinstance(m[key], str) or not NAME_RE.fullmatch(m[key]):
            raise bad(f"has a {key} ({str(m[key])[:60]!r}) that is not a plain name")
    if m["uname_v_marker"] not in RT_MARKERS:
        raise bad(f"has the RT marker {str(m['uname_v_marker'])[:60]!r}, not one rtforge writes "
                  f"({' or '.join(RT_MARKERS)})")
    for key in ("machines", "models", "pis"):
        if key in m and (not isinstance(m[key], list) or not all(isinstance(x, str) for x in m[key])):
            raise bad(f"has {key} that are not a list of strings")
        if key in m and not all((NAME_RE if key == "machines" else _LINE_RE).fullmatch(x) for x in m[key]):
            raise bad(f"has {key} that are not plain names of one line")


def _check_headers(m: dict, bad: Callable[[str], UserError]) -> None:
    """`headers`: the headers package is a listed (and so hashed) file of the
    bundle's headers/ folder -- never a path out of it for the board's apt."""
    h = m.get("headers")
    if h is None:
        return
    if not isinstance(h, dict):
        raise bad("has 'headers' that is not an object")
    deb, package, why = h.get("deb"), h.get("package"), h.get("why")
    if why is not None and (not isinstance(why, str) or not why.isprintable()):
        raise bad("has a headers 'why' that is not one line of text")
    if package is not None and (not isinstance(package, str) or not NAME_RE.fullmatch(package)):
        raise bad(f"names the headers package {str(package)[:60]!r}, which is not a plain name")
    if deb is None:
        return
    name = deb[len("headers/"):] if isinstance(deb, str) and deb.startswith("headers/") else ""
    if not NAME_RE.fullmatch(name) or not name.endswith(".deb"):
        raise bad(f"names the headers package file {str(deb)[:80]!r}, which is not headers/<name>.deb")
    if deb not in m["files"]:
        raise bad(f"names the headers package {deb}, which it does not list (and so does not check)")


def _check_files(root: Path, files: Any, bad: Callable[[str], UserError]) -> None:
    """Every listed path a plain one inside the bundle, through no link."""
    if not isinstance(files, dict) or not all(isinstance(v, str) and SHA256_RE.fullmatch(v) for v in files.values()):
        raise bad("has 'files' that do not map paths to sha256 digests")
    base = resolved(root, f"the bundle {root}")
    for rel in files:
        if not _safe_rel(rel) or rel == "manifest.json":
            raise bad(f"lists {str(rel)[:80]!r}, which is not a plain path inside the bundle")
        target = root / rel
        # every part of the path a real folder or file: a link could lead anywhere
        if any((root / PurePosixPath(*PurePosixPath(rel).parts[:i])).is_symlink()
               for i in range(1, len(PurePosixPath(rel).parts) + 1)):
            raise bad(f"lists {rel}, which is (or lies under) a symbolic link")
        real = resolved(target, f"{rel} in the bundle {root}")
        if real != base and base not in real.parents:
            raise bad(f"lists {rel}, which leads outside the bundle")


def _check_machines(root: Path, m: dict, bad: Callable[[str], UserError]) -> None:
    """The QEMU machines the bundle boots on: plain names, a listed dtb."""
    files = m["files"]
    machines = [("qemu", m["qemu"])] if m.get("qemu") is not None else []
    if m.get("emulated") is not None:
        if not isinstance(m["emulated"], list):
            raise bad("has an 'emulated' entry that is not a list")
        machines += [("emulated", q) for q in m["emulated"]]
    for key, q in machines:
        if not isinstance(q, dict) or not all(isinstance(q.get(k), (str, type(None))) for k in ("machine", "cpu",
                                                                                             "append", "dtb")):
            raise bad(f"has a '{key}' entry that is not an object of strings")
        if not isinstance(q.get("machine"), str) or not NAME_RE.fullmatch(q["machine"]):
            raise bad(f"has a '{key}' entry without a plain machine name")
        dtb = q.get("dtb")
        if dtb is not None and not NAME_RE.fullmatch(dtb):
            raise bad(f"names the QEMU dtb {dtb[:60]!r}, which is not a plain file name")
        if dtb is not None and os.path.lexists(root / "boot" / dtb) and f"boot/{dtb}" not in files:
            raise bad(f"names the QEMU dtb {dtb}, which is in boot/ but not listed (and so not checked)")
