"""Is the kernel a board runs really an RT kernel?  Three witnesses, read in
one round trip through a Transport:

  uname -v            names PREEMPT_RT on every RT kernel (two words,
                      "PREEMPT RT", on 4.x RT patches); required
  /sys/kernel/realtime  1 on RT-patched kernels; mainline 6.12+ has no such
                      file (uname -v is the witness that always exists), so only a value
                      other than 1 counts against
  the running .config /proc/config.gz, else /boot/config-<release>:
                      CONFIG_PREEMPT_RT=y (CONFIG_PREEMPT_RT_FULL=y before
                      5.3); a configuration saying otherwise counts against,
                      a missing one is said, not guessed

The rule is the deploy's (device/deploy/manifest.kernel_problems): a
deploy's verify holds the rebooted board to it with the same witnesses,
read with the board's facts -- a kernel whose uname -v says PREEMPT_RT
while its configuration says PREEMPT_RT is not set is not the kernel that
was built, and the deploy falls back.  This module reads them for `kernel
build --match` and for anyone asking of a running board.

    running_rt(transport, release=None, marker="PREEMPT_RT", root="") -> RtStatus
    judge(uname_v, realtime, config_text, config_from, marker, ...) -> RtStatus  (pure: no I/O)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..device.deploy.manifest import config_line, kernel_problems

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


def judge(uname_v: str, realtime: str | None, config_text: str | None, config_from: str | None,
          marker: str = "PREEMPT_RT", release: str = "", expected_release: str | None = None) -> RtStatus:
    """The verdict from the three witnesses (and the release, when one is
    expected), by the deploy's own rule (device/deploy/manifest.py)."""
    lines = [line for line in (config_text or "").splitlines() if line.strip()]
    problems = kernel_problems(marker, uname_v, realtime, release=expected_release, uname_r=release,
                               config_from=config_from, config_rt=lines)
    problems = [f"it runs {release}, not {expected_release}" if p.startswith("uname -r is ") else p for p in problems]
    notes = [] if config_from else ["no /proc/config.gz or /boot/config-<release> to check its configuration against"]
    config_rt = config_line(lines) if config_from else None
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
