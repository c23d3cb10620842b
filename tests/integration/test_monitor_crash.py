"""The soak monitor killed at each point of closing a window -- before its
hour is appended, between the hour and the day, before the window's own
line, after all of them, and in the middle of the next start's filing --
and started again: every window is filed once, and every hour and day holds
exactly its windows (checked against the window lines themselves).

The cut is a simulation of a power loss, small and named as such: a
preloaded shim kills the probe before the call the test names, and moves
the wall clock to the last seconds of a year, so that a window closes an
hour, a day, a month and a year within seconds of the start."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rtforge.results.soak.windows import Reading, parse_rollup, parse_window, read_records

pytestmark = [pytest.mark.root, pytest.mark.slow]

SIM_CUT = r"""
/* Simulation of a power cut, and of a full card (test_monitor_crash.py).
 * SIM_CUT="call:text,call:text,...": each open/rename/unlink whose path
 * contains the next step's text moves on; at the last step the process is
 * killed before the call.  SIM_FAIL, the same steps: the last step's call,
 * and every later one like it, fails with ENOSPC.  SIM_CLOCK_NS is added
 * to CLOCK_REALTIME. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long shift;

__attribute__((constructor)) static void init(void)
{
    const char *s = getenv("SIM_CLOCK_NS");
    shift = s ? atoll(s) : 0;
}

/* 1 when this call is the spec's last step, or one like it after it */
static int reached(const char *spec, int *step, const char *call, const char *path)
{
    int i = 0, steps = 1;
    if (!spec || !*spec)
        return 0;
    for (const char *p = spec; *p; p++)
        steps += *p == ',';
    for (const char *item = spec; item; item = strchr(item, ','), item = item ? item + 1 : 0, i++) {
        if (i != (*step < steps ? *step : steps - 1))
            continue;
        size_t n = strcspn(item, ","), c = strcspn(item, ":");
        char text[256];
        if (c >= n || n - c - 1 >= sizeof text || strncmp(item, call, c) || call[c])
            return 0;
        memcpy(text, item + c + 1, n - c - 1);
        text[n - c - 1] = 0;
        if (!strstr(path, text))
            return 0;
        if (*step < steps)
            ++*step;
        return *step == steps;
    }
    return 0;
}

/* 0, or -1 if the call is to fail */
static int cut(const char *call, const char *path)
{
    static int cut_step, fail_step;
    if (reached(getenv("SIM_CUT"), &cut_step, call, path))
        kill(getpid(), SIGKILL);
    if (reached(getenv("SIM_FAIL"), &fail_step, call, path)) {
        errno = ENOSPC;
        return -1;
    }
    return 0;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);
    if (!real)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (!rc && id == CLOCK_REALTIME && shift) {
        long long ns = ts->tv_nsec + shift % 1000000000LL;
        ts->tv_sec += shift / 1000000000LL + ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return rc;
}

static int open_as(const char *name, const char *path, int flags, va_list ap)
{
    int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, name);
    if (cut("open", path))
        return -1;
    return flags & (O_CREAT | O_TMPFILE) ? real(path, flags, va_arg(ap, int)) : real(path, flags);
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int fd = open_as("open", path, flags, ap);
    va_end(ap);
    return fd;
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int fd = open_as("open64", path, flags, ap);
    va_end(ap);
    return fd;
}

int rename(const char *from, const char *to)
{
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    return cut("rename", to) ? -1 : real(from, to);
}

int unlink(const char *path)
{
    int (*real)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    return cut("unlink", path) ? -1 : real(path);
}
"""

# The last seconds of a year: the third window closes its hour, day, month
# and year; of an hour: only the hour (its record and the next in one file).
YEAR_END = datetime(2026, 12, 31, 23, 59, 58, tzinfo=UTC)
HOUR_END = datetime(2026, 12, 31, 22, 59, 58, tzinfo=UTC)


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cut")
    (d / "cut.c").write_text(SIM_CUT)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(d / "cut.so"), str(d / "cut.c"), "-ldl"], check=True)
    return d / "cut.so"


def life(probe: Path, shim: Path, state: Path, clock_ns: int, cut: str = "", seconds: int = 2, fail: str = "",
         popen: bool = False):
    env = {**os.environ, "LD_PRELOAD": str(shim), "SIM_CLOCK_NS": str(clock_ns), "SIM_CUT": cut, "SIM_FAIL": fail}
    argv = [str(probe), "--soak", "--state", str(state), "--window-s", "1", "--duration-s", str(seconds)]
    if popen:
        return subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def clock_at(t: datetime) -> int:
    return int(t.timestamp() * 1e9) - time.time_ns()


def check_filed(state: Path, damaged: int = 0, whole: bool = True) -> list:
    """Every window of the folder filed once; every hour and day once per
    life, holding exactly that life's windows (at most, if not `whole`).
    The hours, for the caller."""
    assert not (state / "pending.jsonl").exists()
    reading = Reading()
    windows = read_records(state, "windows", parse_window, reading)
    hours = read_records(state, "hours", parse_rollup, reading)
    days = read_records(state, "days", parse_rollup, reading)
    assert len(reading.damaged) == damaged, reading.damaged
    by_life = defaultdict(list)
    for w in windows:
        by_life[w.life].append(w)
    assert len(by_life) == 2  # the lives killed while filing measured nothing
    for lf, ws in by_life.items():  # each window once, none missing
        assert sorted(w.n for w in ws) == list(range(len(ws))), lf
    for kind, records in (("hour", hours), ("day", days)):
        keys = [(r.key, r.lives[0]) for r in records]
        assert len(keys) == len(set(keys)), f"a {kind} filed twice: {keys}"
        for lf, ws in by_life.items():
            mine = [r for r in records if r.lives == [lf]]
            if not whole:
                assert sum(r.windows for r in mine) <= len(ws), (kind, lf)
                continue
            assert sum(r.windows for r in mine) == len(ws), (kind, lf)
            for i, cpu in enumerate(ws[0].cpus):
                assert sum(r.cpus[i].count for r in mine) == sum(w.cpus[i].count for w in ws), (kind, lf, cpu.cpu)
    return hours


CASES = {
    # a kill in the monitor's first life, as it closes the window that rolls the hour
    "before the hour is appended": ["open:/hours/"],
    "between the hour and the day": ["open:/days/"],
    "before the window's own line": ["open:/hours/,open:/windows/"],
    "after every line, before the state": ["open:/hours/,rename:/state"],
    "before a window's line, no roll": ["rename:pending.jsonl,open:/windows/"],
    "after a window's line, no roll": ["open:/windows/,rename:pending.jsonl"],
    # then a kill in the next start's filing of what the first left
    "filing, before the day": ["open:/hours/", "open:/days/"],
    "filing, after every line": ["open:/hours/", "unlink:pending.jsonl"],
}


@pytest.mark.parametrize("cuts", CASES.values(), ids=CASES.keys())
def test_a_cut_at_any_point_files_each_window_and_hour_once(probe, shim, tmp_path, cuts):
    state = tmp_path / "mon"
    clock = clock_at(YEAR_END)
    first = life(probe, shim, state, clock, cuts[0], seconds=20)
    assert first.returncode == -signal.SIGKILL, f"the cut never came: {first.stderr}"
    for cut in cuts[1:]:  # killed while filing the last life's pending.jsonl
        assert life(probe, shim, state, clock, cut).returncode == -signal.SIGKILL
    done = life(probe, shim, state, clock)
    assert done.returncode == 0, done.stderr
    hours = check_filed(state)
    # the simulated clock: the first life began in the old year, the last one in the new
    turn = int(YEAR_END.timestamp()) + 2
    assert {turn - 3600, turn} <= {h.key for h in hours}


def test_a_line_cut_by_a_power_loss_is_written_again_and_the_one_before_not(probe, shim, tmp_path):
    """The next start files the rolled hour and the hour in progress, into
    one month's file; the power goes as the second is half written."""
    state = tmp_path / "mon"
    clock = clock_at(HOUR_END)
    assert life(probe, shim, state, clock, "open:/hours/", seconds=20).returncode == -signal.SIGKILL
    assert life(probe, shim, state, clock, "unlink:pending.jsonl").returncode == -signal.SIGKILL
    month = state / "hours" / "2026-12.jsonl"
    lines = month.read_bytes().splitlines(keepends=True)
    assert len(lines) == 2  # the rolled hour, the one in progress
    with open(month, "r+b") as f:
        f.truncate(len(lines[0]) + len(lines[1]) // 2)
    assert life(probe, shim, state, clock).returncode == 0
    check_filed(state, damaged=1)  # the half line, as a bad line of its own


def test_a_full_card_files_no_window_twice(probe, shim, tmp_path):
    """pending.jsonl cannot be replaced after the first window (no room for
    a new file, while appends still fit): the old one must not be
    replayed, or its window is filed twice."""
    state = tmp_path / "mon"
    p = life(probe, shim, state, 0, fail="rename:pending.jsonl,rename:pending.jsonl", seconds=30, popen=True)
    try:
        deadline = time.monotonic() + 30
        while len(read_records(state, "windows", parse_window)) < 3:
            assert time.monotonic() < deadline, "the monitor filed no three windows in 30 s"
            time.sleep(0.1)
    finally:
        p.kill()
    said = p.communicate()[1]
    assert life(probe, shim, state, 0).returncode == 0
    check_filed(state, whole=False)  # the killed life's hour in progress is lost, not wrong
    assert f"rtprobe: warning: cannot write {state}/pending.jsonl: No space left on device" in said
