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
/* Simulation of a power cut (tests/integration/test_monitor_crash.py).
 * SIM_CUT="call:text,call:text,...": each open/rename/unlink whose path
 * contains the next step's text moves on; at the last step the process is
 * killed before the call.  SIM_CLOCK_NS is added to CLOCK_REALTIME. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long shift;
static int step;

__attribute__((constructor)) static void init(void)
{
    const char *s = getenv("SIM_CLOCK_NS");
    shift = s ? atoll(s) : 0;
}

static void cut(const char *call, const char *path)
{
    const char *spec = getenv("SIM_CUT");
    int i = 0, steps = 1;
    if (!spec || !*spec)
        return;
    for (const char *p = spec; *p; p++)
        steps += *p == ',';
    for (const char *item = spec; item; item = strchr(item, ','), item = item ? item + 1 : 0, i++) {
        if (i != step)
            continue;
        size_t n = strcspn(item, ","), c = strcspn(item, ":");
        char text[256];
        if (c >= n || n - c - 1 >= sizeof text || strncmp(item, call, c) || call[c])
            return;
        memcpy(text, item + c + 1, n - c - 1);
        text[n - c - 1] = 0;
        if (strstr(path, text) && ++step == steps)
            kill(getpid(), SIGKILL);
        return;
    }
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
    cut("open", path);
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
    cut("rename", to);
    return real(from, to);
}

int unlink(const char *path)
{
    int (*real)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    cut("unlink", path);
    return real(path);
}
"""

# The last seconds of a year: the third window closes its hour, day, month and year.
YEAR_END = datetime(2026, 12, 31, 23, 59, 58, tzinfo=UTC)


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cut")
    (d / "cut.c").write_text(SIM_CUT)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(d / "cut.so"), str(d / "cut.c"), "-ldl"], check=True)
    return d / "cut.so"


def life(probe: Path, shim: Path, state: Path, clock_ns: int, cut: str = "", seconds: int = 2):
    env = {**os.environ, "LD_PRELOAD": str(shim), "SIM_CLOCK_NS": str(clock_ns), "SIM_CUT": cut}
    return subprocess.run([str(probe), "--soak", "--state", str(state), "--window-s", "1",
                           "--duration-s", str(seconds)], env=env, capture_output=True, text=True, timeout=60)


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
    clock = int(YEAR_END.timestamp() * 1e9) - time.time_ns()
    first = life(probe, shim, state, clock, cuts[0], seconds=20)
    assert first.returncode == -signal.SIGKILL, f"the cut never came: {first.stderr}"
    for cut in cuts[1:]:  # killed while filing the last life's pending.jsonl
        assert life(probe, shim, state, clock, cut).returncode == -signal.SIGKILL
    done = life(probe, shim, state, clock)
    assert done.returncode == 0, done.stderr
    assert not (state / "pending.jsonl").exists()

    reading = Reading()
    windows = read_records(state, "windows", parse_window, reading)
    hours = read_records(state, "hours", parse_rollup, reading)
    days = read_records(state, "days", parse_rollup, reading)
    assert reading.damaged == []
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
            assert sum(r.windows for r in mine) == len(ws), (kind, lf)
            for i, cpu in enumerate(ws[0].cpus):
                assert sum(r.cpus[i].count for r in mine) == sum(w.cpus[i].count for w in ws), (kind, lf, cpu.cpu)
    # the simulated clock: the first life began in the old year, the last one in the new
    assert {datetime.fromtimestamp(r.key, UTC).year for r in days} == {2026, 2027}
