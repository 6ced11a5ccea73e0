"""Ctrl-C and SIGTERM as a request to stop at the next step boundary, not a crash.

A signal can arrive anywhere: in the middle of generation, between a backward and the
optimizer step, inside a checkpoint write. Only a step boundary has a state worth saving,
so while training runs, :class:`StopSignals` turns SIGINT and SIGTERM into a flag;
:class:`~agon_lightning.callbacks.AgonCheckpoint` sees the flag after the step, saves
``last`` and raises :class:`Interrupted`. With several processes the flag is shared there
(``reduce_boolean_decision``): a signal to any one rank (``kill`` of rank zero, Ctrl-C to
all) stops them all after the same step. A second signal stops at once, as a plain
KeyboardInterrupt, and so does the first one before any step has completed (nothing would
be saved).

A process blocked in a collective (a peer died; a rank waits on the others) never returns to
Python, so a Python signal handler never runs there. A watchdog thread sees the signal anyway,
through :func:`signal.set_wakeup_fd` (written by the C-level handler): if the process has not
stopped ``timeout_s`` after the first signal, or right after a second one, it prints every
thread's stack and exits with status 128 + the signal number, keeping the last checkpoint
written.

Why the checkpoint composes :class:`StopSignals` rather than a callback of its own doing the
stop: the stop has to come after the checkpoint's own work at the same step boundary (the
periodic save, the best save and the refresh of ``last`` after a validation), and Lightning
runs every ``Checkpoint`` callback after all other callbacks, so a separate callback would
raise before the save it waits for. Setting ``trainer.should_stop`` instead would not wait
either: Lightning answers it with a validation that was not due. Composed, the order is the
checkpoint's own, through public hooks only.
"""

from __future__ import annotations

import faulthandler
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
SECOND_SIGNAL_GRACE_S = 2.0  # after a second signal: time for the KeyboardInterrupt to end the process


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
        timeout_s: Exit anyway (stacks printed, status 128 + signal) this long after the first
            signal if the process is still running, e.g. blocked in a collective; ``None``: wait.
    """

    def __init__(self, defer: Callable[[], bool] = lambda: True, timeout_s: float | None = None) -> None:
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s}")
        self.defer = defer
        self.timeout_s = timeout_s
        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        self._watchdog: _Watchdog | None = None

    def install(self) -> None:
        """Take over the signals (the main thread only: Python delivers signals there)."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        self.received = None
        self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        if self.timeout_s is not None:
            self._watchdog = _Watchdog(self.timeout_s)

    def restore(self) -> None:
        """Give the signals back to whoever had them before :meth:`install`; the watchdog stands down."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None

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


class _Watchdog:
    """A daemon thread that ends the process ``timeout_s`` after a first signal, or soon after a second.

    The C-level signal handler writes each signal's number to the wakeup pipe even while the
    main thread is inside a blocking call; this thread reads it there.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._stopped = threading.Event()
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._run, name="agon-stop-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(self._previous_fd)
        try:
            os.write(self._write, b"\0")  # wakes the thread, which closes the pipe
        except OSError:  # closed already
            pass

    def _next_signal(self, timeout: float | None) -> int | None:
        """The next SIGINT/SIGTERM written to the pipe within ``timeout`` s (``None``: any time); else ``None``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stopped.is_set():
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select([self._read], [], [], left)
            if not ready:
                return None
            for byte in os.read(self._read, 64):
                if byte in SIGNALS:
                    return byte
        return None

    def _run(self) -> None:
        try:
            first = self._next_signal(None)
            if first is None:
                return
            second = self._next_signal(self.timeout_s)
            if self._stopped.is_set():
                return
            if second is not None and not self._stopped.wait(SECOND_SIGNAL_GRACE_S):
                self._give_up(second, "a second signal, and the process did not stop")
            elif second is None:
                self._give_up(first, f"{self.timeout_s:g} s after the signal the process is still running")
        finally:
            os.close(self._read)
            os.close(self._write)

    def _give_up(self, signum: int, why: str) -> None:
        name = signal.Signals(signum).name
        sys.stderr.write(
            f"\n{name}: {why} (blocked in a collective, or a step longer than that); exiting without "
            "saving: the last checkpoint written is kept. Stacks of every thread:\n"
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(128 + signum)
