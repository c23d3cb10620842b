"""Is the kernel a board runs really an RT kernel?  Three witnesses, read in
one round trip through a Transport:

  uname -v            names PREEMPT_RT on every RT kernel (two words,
                      "PREEMPT RT", on 4.x RT patches); required
  /sys/kernel/realtime  1 on RT-patched kernels; mainline 6.12+ has no such
                      file (DESIGN: check uname -v first), so only a value
                      other than 1 counts against
  the running .config /proc/config.gz, else /boot/config-<release>:
                      CONFIG_PREEMPT_RT=y (CONFIG_PREEMPT_RT_FULL=y before
                      5.3); a configuration saying otherwise counts against,
                      a missing one is said, not guessed

A deploy's verify calls this after the reboot: a kernel whose uname -v says
PREEMPT_RT while its configuration says PREEMPT_RT is not set is not the
kernel that was built, and the deploy must fall back.

    running_rt(transport, release=None, marker="PREEMPT_RT", root="") -> RtStatus
    judge(uname_v, realtime, config_text, config_from, marker, ...) -> RtStatus  (pure: no I/O)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# $1 root; "@@name" before each fact.  The config is grepped on the board:
# only its PREEMPT_RT lines come back.
_SCRIPT = r"""
R="$1"
s() { printf '\n@@%s\n' "$1"; }
s release; head -c 200 "$R/proc/sys/kernel/osrelease" 2>/dev/null
s version; head -c 400 "$R/proc/sys/kernel/version" 2>/dev/null
s realtime; head -c 16 "$R/sys/kernel/realtime" 2>/dev/null
rel=$(head -c 200 "$R/proc/sys/kernel/osrelease" 2>/dev/null | tr -d '\n')
case "$rel" in ''|*[!A-Za-z0-9._+~-]*|.*) rel= ;; esac
P='^(CONFIG_PREEMPT_RT(_FULL)?=|# CONFIG_PREEMPT_RT(_FULL)? is not set)'
if [ -r "$R/proc/config.gz" ]; then
  s config:/proc/config.gz; gzip -dc "$R/proc/config.gz" 2>/dev/null | grep -E "$P"
elif [ -n "$rel" ] && [ -r "$R/boot/config-$rel" ]; then
  s "config:/boot/config-$rel"; grep -E "$P" "$R/boot/config-$rel"
fi
exit 0
"""


@dataclass
class RtStatus:
    is_rt: bool
    release: str
    uname_v: str
    realtime: str | None            # "1", "0", or None where the kernel has no such file
    config_from: str | None         # where the configuration was read, None when there is none
    config_rt: str | None           # the configuration's PREEMPT_RT line, or None
    problems: list[str] = field(default_factory=list)    # why it is not the RT kernel expected
    notes: list[str] = field(default_factory=list)       # what could not be checked
    marker: str = "PREEMPT_RT"

    def sentence(self) -> str:
        if self.is_rt:
            seen = [f"uname -v has {self.marker}"]
            seen.append("/sys/kernel/realtime is 1" if self.realtime == "1" else "no /sys/kernel/realtime (mainline)")
            if self.config_from:
                seen.append(f"{self.config_from} has {self.config_rt}")
            return f"{self.release} is an RT kernel: " + ", ".join(seen) + "".join(f"; {n}" for n in self.notes)
        return f"{self.release} is not the RT kernel expected: " + "; ".join(self.problems)


def _has_marker(uname_v: str, marker: str) -> bool:
    tokens = uname_v.split()
    if marker in tokens:
        return True
    # RT patches before 5.x: "#1 SMP PREEMPT RT Fri ..."
    return marker in ("RT", "PREEMPT_RT") and any(a == "PREEMPT" and b == "RT" for a, b in zip(tokens, tokens[1:]))


def judge(uname_v: str, realtime: str | None, config_text: str | None, config_from: str | None,
          marker: str = "PREEMPT_RT", release: str = "", expected_release: str | None = None) -> RtStatus:
    """The verdict from the three witnesses (and the release, when one is expected)."""
    problems, notes = [], []
    if expected_release and release != expected_release:
        problems.append(f"it runs {release}, not {expected_release}")
    if not _has_marker(uname_v, marker):
        problems.append(f"uname -v lacks {marker} ({uname_v})")
    if realtime is not None and realtime != "1":
        problems.append(f"/sys/kernel/realtime is {realtime}")
    config_rt = None
    if config_from is None:
        notes.append("no /proc/config.gz or /boot/config-<release> to check its configuration against")
    else:
        lines = [line for line in (config_text or "").splitlines() if line.strip()]
        on = [line for line in lines if re.fullmatch(r"CONFIG_PREEMPT_RT(_FULL)?=y", line)]
        config_rt = on[0] if on else (lines[0] if lines else "no PREEMPT_RT line")
        if not on:
            problems.append(f"its configuration ({config_from}) has {config_rt}")
    return RtStatus(not problems, release, uname_v, realtime, config_from, config_rt, problems, notes, marker)


def running_rt(transport, *, release: str | None = None, marker: str = "PREEMPT_RT", root: str = "") -> RtStatus:
    """The verdict on the transport's running kernel; release: the one that
    must run (a deploy's bundle), marker: the word its uname -v must hold
    (a bundle manifest's uname_v_marker)."""
    out = transport.run(["sh", "-c", _SCRIPT, "sh", root], timeout=60, check=True,
                        step="checking the running kernel is RT").stdout
    v: dict[str, str] = {}
    for block in out.split("\n@@")[1:]:
        key, _, value = block.partition("\n")
        v[key] = value.strip("\n\0 ")
    config_key = next((k for k in v if k.startswith("config:")), None)
    realtime = v.get("realtime") or None
    return judge(v.get("version", ""), realtime, v.get(config_key) if config_key else None,
                 config_key.removeprefix("config:") if config_key else None, marker, v.get("release", ""), release)
