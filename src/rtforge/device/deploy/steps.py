"""Named steps with paired cleanups (the kas "Macro" idea, architecture rule 6).

Each step that changes the board registers how to undo it.  When a later
step fails, the undo actions of the steps done so far run newest first, so
the board ends as it was: booting its previous kernel.  A lost connection
during cleanup is retried for a while (a Wi-Fi hiccup should not leave
litter), and whatever could still not be undone is reported, not hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...errors import UserError
from ..transport.transport import ConnectionLost

CLEANUP_RETRY_S = 30.0


class Steps:
    def __init__(self, on_step: Callable[[str], None] | None = None, retry_s: float = CLEANUP_RETRY_S):
        self.on_step = on_step or (lambda name: None)
        self.retry_s = retry_s
        self.done: list[tuple[str, Callable[[], Any] | None]] = []
        self.current: str | None = None
        self.not_undone: list[str] = []

    def run(self, name: str, action: Callable[[], Any], undo: Callable[[], Any] | None = None,
            partial: bool = False) -> Any:
        """partial: the action can fail half-way (an upload), leaving
        something to undo, so its undo is registered before it starts."""
        self.current = name
        self.on_step(name)
        if partial:
            self.done.append((name, undo))
        result = action()
        if not partial:
            self.done.append((name, undo))
        self.current = None
        return result

    def guarded(self, actions: Callable[[], Any], safe: str) -> Any:
        """Run actions; if they fail, undo what was done.  When something
        could not be undone, the error says what, and what is still safe."""
        try:
            return actions()
        except BaseException as e:
            not_undone = self.unwind()
            if not_undone and isinstance(e, UserError):
                raise UserError(f"{e}; could not undo: {'; '.join(not_undone)} ({safe})") from None
            raise

    def keep(self) -> None:
        """The change is committed: nothing is undone any more."""
        self.done.clear()

    def unwind(self, only: Callable[[str], bool] | None = None) -> list[str]:
        """Undo the completed steps (those `only` accepts), newest first;
        returns what could not be undone."""
        for name, undo in reversed(self.done):
            if undo is None or (only and not only(name)):
                continue
            deadline = time.monotonic() + self.retry_s
            while True:
                try:
                    undo()
                    break
                except ConnectionLost as e:
                    if time.monotonic() >= deadline:
                        self.not_undone.append(f"{name} ({e})")
                        break
                    time.sleep(1.0)
                except Exception as e:  # keep undoing the rest, report this one
                    self.not_undone.append(f"{name} ({e})")
                    break
        self.done.clear()
        return self.not_undone
