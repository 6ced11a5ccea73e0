"""Worker processes that run jobs each within a wall-clock bound, killed and replaced past it.

Some checks cannot be bounded from inside: math-verify, for one, bounds its own work with
``SIGALRM``, which works only in the main thread of the main interpreter, not wherever a
trainer happens to call a verifier. :class:`BoundedPool` runs such jobs in worker processes
instead; the parent waits at most ``timeout_s`` for a job, then kills that worker, starts a
fresh one and reports the job as ``"timeout"``. A process can be killed whatever it is doing,
so a pathological input costs at most ``timeout_s`` plus a kill and never stalls training.
A batch of jobs is spread over all workers.

Workers are fresh interpreters (fork + exec, ``python -c`` rather than multiprocessing), safe
to start from a trainer that holds CUDA state and threads, and they never re-import the
caller's ``__main__``. A pool belongs to the process that created it: a forked child neither
uses nor stops its parent's workers. Workers stop at :meth:`BoundedPool.close`, at garbage
collection or at interpreter exit, whichever comes first.

Why not a library: pebble's ``ProcessPool`` has per-task timeouts with worker replacement, but
against ``tests/test_math_verifier.py`` it held up under no start method: a batch of two
timeouts on two workers took 2.2-2.6 s instead of under 2 s (no way to wait until every worker
has warmed up), under ``forkserver`` a forked copy (a dataloader worker) cannot start a pool of
its own, plain ``fork`` is unsafe next to CUDA and threads, and ``spawn`` re-imports the
caller's ``__main__``.
"""

from __future__ import annotations

import importlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

_READY = "ready"
# A fresh worker's imports (sympy and math-verify, say) take seconds on a loaded machine; that
# is start-up, not a job, and gets its own generous bound.
_STARTUP_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------- worker side


def _worker_main(fd: int, timeout_s: float, warm_up: str | None) -> None:
    """Answer ``(fn, args)`` jobs on socket ``fd`` with ``("ok", fn(*args))`` or ``("error", msg)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)
    if warm_up is not None:  # start-up work (imports, caches) is not job time: done before "ready"
        module, _, name = warm_up.partition(":")
        getattr(importlib.import_module(module), name)()
    conn.send(_READY)
    while True:
        try:
            job = conn.recv()
        except EOFError:  # the parent is gone
            return
        # The parent kills a job at timeout_s of wall time. Should the parent die first, the
        # kernel ends a runaway job once it has used a few times that much CPU time.
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime + 4 * timeout_s) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        fn, args = job
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except Exception as err:  # reported to the parent, which turns it into a verdict
            reply = ("error", f"{type(err).__name__}: {err}")
        conn.send(reply)


# --------------------------------------------------------------------------- parent side


class _Worker:
    """A worker interpreter: ``python -c`` rather than multiprocessing, so it never re-imports
    the caller's ``__main__`` and needs no ``if __name__ == "__main__"`` guard there."""

    def __init__(self, timeout_s: float, warm_up: str | None) -> None:
        ours, theirs = socket.socketpair()
        args = f"{theirs.fileno()}, {timeout_s!r}, {warm_up!r}"
        code = f"from {__name__} import _worker_main; _worker_main({args})"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ready = False
        self.job: int | None = None
        self.deadline = time.monotonic() + _STARTUP_TIMEOUT_S

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()


def _stop_workers(workers: list[_Worker], owner_pid: int) -> None:
    # A forked child inherits this list; only the process that started the workers stops them.
    if os.getpid() == owner_pid:
        for worker in workers:
            worker.stop()
    workers.clear()


class BoundedPool:
    """Worker processes that run picklable ``fn(*args)`` jobs, each within ``timeout_s``.

    Args:
        size: Number of worker processes.
        timeout_s: Wall-clock bound on one job; a worker past it is killed and replaced.
        warm_up: ``"module:function"`` that each fresh worker calls before it takes jobs
            (imports, caches), so that start-up never counts against a job's bound.
    """

    def __init__(self, size: int, timeout_s: float, warm_up: str | None = None) -> None:
        self.size = size
        self.timeout_s = timeout_s
        self.warm_up = warm_up
        self.owner_pid = os.getpid()
        self.workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _stop_workers, self.workers, self.owner_pid)

    def start(self) -> None:
        """Start all workers and wait until each is ready (otherwise :meth:`run` starts them)."""
        try:
            while len(self.workers) < self.size:
                self.workers.append(_Worker(self.timeout_s, self.warm_up))
            while starting := {w.conn: w for w in self.workers if not w.ready}:
                next_deadline = min(w.deadline for w in starting.values())
                ready = wait(list(starting), timeout=max(0.0, next_deadline - time.monotonic()))
                if not ready:
                    raise RuntimeError(f"a pool worker did not start within {_STARTUP_TIMEOUT_S:.0f} s")
                for conn in ready:
                    self._receive(starting[conn], [])
        except BaseException:
            self.close()
            raise

    def run(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]]) -> list[tuple[str, Any]]:
        """``fn(*args)`` for every job: ``("ok", value)``, ``("timeout", None)`` or ``("error", msg)``."""
        try:
            return self._run(fn, jobs)
        except BaseException:
            self.close()  # interrupted mid-batch: workers hold stale jobs, start afresh next time
            raise

    def _run(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]]) -> list[tuple[str, Any]]:
        while len(self.workers) < min(self.size, len(jobs)):
            self.workers.append(_Worker(self.timeout_s, self.warm_up))
        results: list[tuple[str, Any] | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        while pending or any(w.job is not None for w in self.workers):
            for worker in self.workers:
                if worker.ready and worker.job is None and pending:
                    index = pending.popleft()
                    try:
                        worker.conn.send((fn, jobs[index]))
                    except OSError:  # died while idle: requeue the job on a fresh worker
                        pending.appendleft(index)
                        self._replace(worker)
                        continue
                    worker.job, worker.deadline = index, time.monotonic() + self.timeout_s
            waiting = {w.conn: w for w in self.workers if w.job is not None or not w.ready}
            next_deadline = min(w.deadline for w in waiting.values())
            for conn in wait(list(waiting), timeout=max(0.0, next_deadline - time.monotonic())):
                self._receive(waiting[conn], results)
            now = time.monotonic()
            for worker in waiting.values():
                if worker.deadline > now or worker not in self.workers:
                    continue
                if not worker.ready:
                    raise RuntimeError(f"a pool worker did not start within {_STARTUP_TIMEOUT_S:.0f} s")
                if worker.job is not None:
                    results[worker.job] = ("timeout", None)
                    self._replace(worker)
        return results  # type: ignore[return-value]

    def _receive(self, worker: _Worker, results: list[tuple[str, Any] | None]) -> None:
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            code = worker.process.poll()
            if worker.job is None:
                raise RuntimeError(f"a pool worker died while starting (exit code {code})") from None
            results[worker.job] = ("error", f"worker died (exit code {code})")
            self._replace(worker)
            return
        if worker.ready:
            results[worker.job] = message  # type: ignore[index]
            worker.job = None
        else:
            worker.ready = message == _READY

    def _replace(self, worker: _Worker) -> None:
        worker.stop()
        self.workers[self.workers.index(worker)] = _Worker(self.timeout_s, self.warm_up)

    def close(self) -> None:
        """Stop every worker now (a later :meth:`run` starts new ones)."""
        _stop_workers(self.workers, self.owner_pid)
