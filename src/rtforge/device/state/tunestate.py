"""What `rtforge tune` changed on a target, saved on the target itself.

The file holds, per setting, the value before rtforge first changed it and
the value it wrote, so that `--revert` restores exactly the state before
(even after several tunes: the first before-value wins) and `--show` and
`doctor` can tell what is applied.  Runtime settings do not survive a
reboot, so the file records the boot it was written in; boot-time settings
(kernel command line words) do survive it, so they are kept apart, with the
exact command line before (a Pi: the text of the cmdline file the firmware
read; GRUB: the drop-in rtforge writes, or its absence) to restore.

format_version history:
  1  boot_id, isolate, created, updated, settings[op, kind, target, before, applied, label]
  2  + boot (settings of kind "cmdline", kept across reboots), boot_before {"how": "pi", "cmdline": text} or
     {"how": "grub", "dropin": text or null}
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from ..transport.safesh import BOARD_DIR, ensure_owned

STATE_PATH = f"{BOARD_DIR}/tune-state.json"
FORMAT_VERSION = 2


@dataclass
class SavedSetting:
    op: str                 # the operation that changed it ("governor", "irq-affinity", ...)
    kind: str               # how it is read and written ("file", "wifi", "cmdline")
    target: str             # a path below the root, an interface name, a command-line parameter
    before: str | None      # the value before rtforge changed it (None: it was not there)
    applied: str            # the value rtforge wrote
    label: str = ""         # for people: "IRQ 62 dwc_otg", "policy0"

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.target}"


@dataclass
class TuneState:
    boot_id: str
    isolate: list[int] = field(default_factory=list)
    created: str = ""
    updated: str = ""
    settings: list[SavedSetting] = field(default_factory=list)      # runtime: this boot only
    boot: list[SavedSetting] = field(default_factory=list)          # kernel command line words
    boot_before: dict | None = None                                 # how to restore the command line exactly
    format_version: int = FORMAT_VERSION

    def empty(self) -> bool:
        return not (self.settings or self.boot or self.boot_before)

    def ops(self) -> list[str]:
        return list(dict.fromkeys(s.op for s in self.settings))

    def by_key(self) -> dict[str, SavedSetting]:
        return {s.key: s for s in self.settings}

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"


def parse_state(text: str | None) -> TuneState | None:
    """The saved state, or None when there is none (or it is not rtforge's)."""
    if not text or not text.strip():
        return None
    try:
        doc = json.loads(text)
        return TuneState(boot_id=doc["boot_id"], isolate=list(doc.get("isolate", [])),
                         created=doc.get("created", ""), updated=doc.get("updated", ""),
                         settings=[SavedSetting(**s) for s in doc.get("settings", [])],
                         boot=[SavedSetting(**s) for s in doc.get("boot", [])],
                         boot_before=doc.get("boot_before"),
                         format_version=doc.get("format_version", FORMAT_VERSION))
    except (ValueError, KeyError, TypeError):
        return None


def load_state(board) -> TuneState | None:
    """The state on the target now (not from a snapshot: a reboot or a write may have happened since)."""
    if not board.t.exists(board.path(STATE_PATH)):
        return None
    # bounded, regular files only: a FIFO or /dev/zero put there is refused, not read forever
    return parse_state(board.t.read_text(board.path(STATE_PATH), step=f"reading {STATE_PATH}"))


def save_state(board, state: TuneState | None) -> None:
    path = board.path(STATE_PATH)
    if state is None or state.empty():
        board.t.run(["rm", "-f", "--", path], sudo=True, check=True, step=f"removing {STATE_PATH}")
        return
    # root's own folder, readable by doctor's login: never one another user made (or a link out of a --sysroot)
    folder = path.rsplit("/", 1)[0]
    ensure_owned(board.t, folder, readable=(folder,), step=f"making {STATE_PATH.rsplit('/', 1)[0]}")
    board.t.write_bytes(path, state.to_json().encode(), sudo=True, step=f"saving {STATE_PATH}")
