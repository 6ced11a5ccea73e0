"""Math answers checked with math-verify, every check bounded in a worker process.

Grading follows the DeepMath authors' reward: only the text after the last ``</think>``
counts; its last ``\\boxed{…}`` is the answer; the gold answer is wrapped as ``\\boxed{gold}``
and passed to math-verify *first* (its comparison is not symmetric).

Why worker processes: math-verify bounds its own work with ``SIGALRM``, which works only in
the main thread of the main interpreter, not wherever a trainer happens to call a verifier.
So each check runs in a worker process with math-verify's timeouts switched off; the parent
waits at most ``timeout_s`` for it, then kills that worker, starts a fresh one and rules the
answer wrong with reason ``"timeout"``. A process can be killed whatever it is doing, so a
pathological expression costs at most ``timeout_s`` plus a kill and never stalls training.
A batch is checked by all workers in parallel.

Workers are fresh interpreters (fork + exec), safe to start from a trainer that holds CUDA
state and threads. The pool is created on first use, left behind when the verifier is
pickled (DDP spawn, checkpoints) or forked (dataloader workers), where the copy starts its
own, and shut down by :meth:`MathVerifier.close`, at garbage collection or at interpreter
exit, whichever comes first.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from agon_lightning.text import THINK_CLOSE, after_thinking, last_boxed_span
from agon_lightning.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier

log = logging.getLogger(__name__)

_READY = "ready"
# Importing sympy and math-verify in a fresh worker takes seconds on a loaded machine; that
# is start-up, not a check, and gets its own generous bound.
_STARTUP_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------- worker side


def _worker_main(fd: int, timeout_s: float) -> None:
    """Answer ``(fn, args)`` jobs on socket ``fd`` with ``("ok", fn(*args))`` or ``("error", msg)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # We bound time ourselves; math-verify's "timeout is disabled" warning is noise here.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    conn = Connection(fd)
    grade("1", "\\boxed{1.0}", 6, 15, True)  # load the LaTeX grammar now: start-up is not check time
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


def grade(
    gold: str, tail: str, float_rounding: int, numeric_precision: int, strict: bool
) -> tuple[str, str | None]:
    """``(reason, extracted)`` of the text after the trace: ``"ok"``, ``"wrong_answer"``, ``"no_answer"``.

    The last ``\\boxed{…}`` of ``tail`` is the answer; ``\\boxed{gold}`` goes to math-verify
    first. Runs unbounded (even finding the box is quadratic in a degenerate tail): call it
    in a worker the caller can kill.
    """
    span = last_boxed_span(tail)
    answer = span[2].strip() if span is not None else ""
    if not answer:
        return "no_answer", None
    # Identical strings need no parser (and math-verify rejects some it cannot parse).
    if answer == gold:
        return "ok", answer
    from math_verify import parse, verify

    same = verify(
        parse(f"\\boxed{{{gold}}}", parsing_timeout=None),
        parse(f"\\boxed{{{answer}}}", parsing_timeout=None),
        float_rounding=float_rounding,
        numeric_precision=numeric_precision,
        strict=strict,
        timeout_seconds=None,
    )
    return ("ok" if same else "wrong_answer"), answer


# --------------------------------------------------------------------------- parent side


class _Worker:
    """A worker interpreter: ``python -c`` rather than multiprocessing, so it never re-imports
    the caller's ``__main__`` and needs no ``if __name__ == "__main__"`` guard there."""

    def __init__(self, timeout_s: float) -> None:
        ours, theirs = socket.socketpair()
        code = f"from {__name__} import _worker_main; _worker_main({theirs.fileno()}, {timeout_s!r})"
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
    """

    def __init__(self, size: int, timeout_s: float) -> None:
        self.size = size
        self.timeout_s = timeout_s
        self.owner_pid = os.getpid()
        self.workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _stop_workers, self.workers, self.owner_pid)

    def start(self) -> None:
        """Start all workers and wait until each is ready (otherwise :meth:`run` starts them)."""
        try:
            while len(self.workers) < self.size:
                self.workers.append(_Worker(self.timeout_s))
            while starting := {w.conn: w for w in self.workers if not w.ready}:
                next_deadline = min(w.deadline for w in starting.values())
                ready = wait(list(starting), timeout=max(0.0, next_deadline - time.monotonic()))
                if not ready:
                    raise RuntimeError(f"a verifier worker did not start within {_STARTUP_TIMEOUT_S:.0f} s")
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
            self.workers.append(_Worker(self.timeout_s))
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
                    raise RuntimeError(f"a verifier worker did not start within {_STARTUP_TIMEOUT_S:.0f} s")
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
                raise RuntimeError(f"a verifier worker died while starting (exit code {code})") from None
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
        self.workers[self.workers.index(worker)] = _Worker(self.timeout_s)

    def close(self) -> None:
        """Stop every worker now (a later :meth:`run` starts new ones)."""
        _stop_workers(self.workers, self.owner_pid)


class MathVerifier(Verifier):
    """DeepMath-style grading with math-verify, bounded and parallel.

    Args:
        timeout_s: Most seconds one answer check may take; past it the answer is wrong
            with reason ``"timeout"``.
        num_workers: Worker processes per trainer process (default: ``min(4, cpu_count)``).
        require_thinking: Treat a completion without ``</think>`` as a format failure
            (Qwen3 thinking mode). Off: a completion with no reasoning tags is all answer.
        float_rounding: Decimal places math-verify rounds floats to.
        numeric_precision: Significant digits for math-verify's numeric comparison.
        strict: math-verify's strict mode (variables matter; sets and tuples differ).
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        num_workers: int | None = None,
        require_thinking: bool = True,
        float_rounding: int = 6,
        numeric_precision: int = 15,
        strict: bool = True,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers must be >= 1 or None (automatic), got {num_workers}")
        self.timeout_s = timeout_s
        self.num_workers = num_workers or min(4, os.cpu_count() or 1)
        self.require_thinking = require_thinking
        self.float_rounding = float_rounding
        self.numeric_precision = numeric_precision
        self.strict = strict
        self._pool: BoundedPool | None = None
        self._lock: threading.Lock | None = None
        self._lock_pid: int | None = None

    def verify(self, completion: str, problem: Problem) -> Verdict:
        return self.verify_batch([completion], [problem])[0]

    def verify_batch(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[Verdict]:
        if len(completions) != len(problems):
            raise ValueError(
                f"verify_batch needs one problem per completion, got {len(completions)} "
                f"completions and {len(problems)} problems"
            )
        verdicts: list[Verdict | None] = []
        checks: list[tuple[int, tuple[Any, ...]]] = []  # (index, grade's arguments) for the workers
        options = (self.float_rounding, self.numeric_precision, self.strict)
        for completion, problem in zip(completions, problems, strict=True):
            if problem.answer is None or not problem.answer.strip():
                raise ValueError(f"MathVerifier needs a gold answer; {problem.question[:60]!r} has none")
            tail = after_thinking(completion)
            if self.require_thinking and THINK_CLOSE not in completion:
                tail = None
            if tail is None:  # no </think>: cut off inside the trace, or no trace where one is required
                verdicts.append(Verdict(correct=False, reason="no_think_close"))
                continue
            checks.append((len(verdicts), (problem.answer.strip(), tail, *options)))
            verdicts.append(None)
        if checks:
            with self._guard():
                results = self._get_pool().run(grade, [args for _, args in checks])
            for (index, args), (status, value) in zip(checks, results, strict=True):
                verdicts[index] = self._verdict(status, value, tail=args[1])
        return verdicts  # type: ignore[return-value]

    def _verdict(self, status: str, value: Any, tail: str) -> Verdict:
        if status == "ok":
            reason, extracted = value
            ok = reason == "ok"
            return Verdict(correct=ok, score=float(ok), reason=reason, extracted=extracted)
        if status == "timeout":
            log.warning("math-verify took over %.1f s on ...%r: counted wrong", self.timeout_s, tail[-200:])
            return Verdict(correct=False, reason="timeout")
        log.warning("math-verify failed (%s) on ...%r: counted wrong", value, tail[-200:])
        return Verdict(correct=False, reason="verifier_error")

    def start(self) -> None:
        """Start the worker processes now and wait for them (otherwise the first check does)."""
        with self._guard():
            self._get_pool().start()

    def _get_pool(self) -> BoundedPool:
        if self._pool is not None and self._pool.owner_pid != os.getpid():
            self._pool = None  # inherited through fork: those workers belong to the parent
        if self._pool is None:
            self._pool = BoundedPool(self.num_workers, self.timeout_s)
        return self._pool

    def close(self) -> None:
        """Stop the worker processes (a later check starts new ones)."""
        with self._guard():
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def _guard(self) -> threading.Lock:
        # A forked child may inherit the lock held by another thread of its parent: it takes its own.
        if self._lock is None or self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        return self._lock

    def __getstate__(self) -> dict[str, Any]:
        # Processes, pipes and locks do not travel: the copy starts its own pool when used.
        return {**self.__dict__, "_pool": None, "_lock": None, "_lock_pid": None}
