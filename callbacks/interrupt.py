"""Ctrl-C and SIGTERM as a request to stop at the next step boundary, not a crash.

A signal can arrive anywhere: in the middle of generation, between a backward and the
optimizer step, inside a checkpoint write. Only a step boundary has a state worth saving,
so while training runs, :class:`StopSignals` turns SIGINT and SIGTERM into a flag;
:class:`~agon_lightning.callbacks.AgonCheckpoint` sees the flag after the step, saves
``last`` and raises :class:`Interrupted`. A second signal stops at once, as a plain
KeyboardInterrupt, and so does the first one before any step has completed (nothing would
be saved).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(SystemExit):
    """Raised once the interrupt's checkpoint is written; exits with status 128 + the signal number.

    A ``SystemExit``, so Lightning runs its ``on_exception`` hooks and tears down, and the
    process ends with the status a shell reports for that signal (130, 143).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class StopSignals:
    """While installed, SIGINT and SIGTERM set :attr:`received` instead of stopping the process.

    Args:
        defer: Called on a first signal; when it returns ``False`` (nothing to save yet) the
            signal stops the process at once, as a KeyboardInterrupt.
    """

    def __init__(self, defer: Callable[[], bool] = lambda: True) -> None:
        self.defer = defer
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Take over the signals (the main thread only: Python delivers signals there)."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        self.received = None
        self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}

    def restore(self) -> None:
        """Give the signals back to whoever had them before :meth:`install`."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None or not self.defer():
            self.restore()
            raise KeyboardInterrupt(name)
        self.received = signum
        sys.stderr.write(
            f"\n{name}: finishing this step, then saving a resumable checkpoint and stopping "
            f"(send {name} again to stop at once without saving)\n"
        )
