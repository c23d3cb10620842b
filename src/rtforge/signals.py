"""Ctrl-C and SIGTERM around the steps they must not cut in two: a
cleanup that a second Ctrl-C must not stop (held), and a step that must
happen whole before an interrupt acts (deferred)."""

from __future__ import annotations

import signal
from contextlib import contextmanager


@contextmanager
def deferred_signals():
    """Hold SIGINT/SIGTERM back until the block ends, then let them act: a
    step that must happen whole (a window taken and its line printed) is not
    cut in two.  rich, for one, flushes a line before it forgets it, and an
    interrupt between the two prints that line again with the next.  The
    mask is this thread's: the loops that use it run where no other thread
    could take the signal instead."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def held_signals():
    """Ignore SIGINT/SIGTERM while cleaning up: we are already stopping, and
    a second Ctrl-C must not cut the cleanup short.  Only the main thread
    may set handlers; elsewhere this does nothing."""
    try:
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
