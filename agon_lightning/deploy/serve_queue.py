"""The bounded batching queue of ``agon serve``: concurrent requests become one batch of both stages.

Requests arrive on the server's event loop; one worker thread owns the model. It takes the
oldest waiting job, waits ``wait_s`` for company, and runs every waiting job that can share
its batch (same model, same sampling settings, neither seeded) up to ``max_rows`` sequences,
oldest first; the others keep their place. A full queue refuses at once (the endpoint answers
503 with ``Retry-After``) instead of letting latency grow without bound. On the vLLM backend the
same queue hands each group to the engine in one call, where vLLM's scheduler batches them.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from agon_lightning.deploy.serve_api import APIError
from agon_lightning.deploy.serve_engine import Job

log = logging.getLogger(__name__)


class QueueFull(APIError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            503,
            f"the server is at capacity ({limit} requests waiting); retry shortly",
            type="server_overloaded",
            code="queue_full",
        )


class BatchQueue:
    """Jobs waiting for the worker, at most ``max_pending``.

    Args:
        run: Runs one batch and settles each job's future (:meth:`CascadeRunner.run`).
        max_rows: Most sequences (questions × n) in one batch; a larger job runs alone.
        max_pending: Most jobs waiting; one more is refused with :class:`QueueFull`.
        wait_s: How long the worker waits for more jobs before running a batch.
    """

    def __init__(
        self,
        run: Callable[[list[Job]], None],
        max_rows: int = 32,
        max_pending: int = 256,
        wait_s: float = 0.005,
    ) -> None:
        if max_rows < 1 or max_pending < 1 or wait_s < 0:
            raise ValueError(
                f"max_rows and max_pending must be >= 1 and wait_s >= 0, got {max_rows}, {max_pending}, {wait_s}"
            )
        self.run, self.max_rows, self.max_pending, self.wait_s = run, max_rows, max_pending, wait_s
        self._jobs: deque[Job] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="agon-serve-worker", daemon=True)
        self.batches = 0  # batches run so far (for tests and logs)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> Job:
        """Queue ``job``; raises :class:`QueueFull` when ``max_pending`` jobs wait, an APIError when stopping."""
        with self._cv:
            if self._stopping:
                raise APIError(503, "the server is shutting down", type="server_error", code="shutting_down")
            if len(self._jobs) >= self.max_pending:
                raise QueueFull(self.max_pending)
            self._jobs.append(job)
            self._cv.notify()
        return job

    def stop(self, timeout: float | None = None) -> None:
        """Finish the jobs already queued, then end the worker."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _take(self) -> list[Job] | None:
        """The next batch, oldest job first; ``None`` once stopping with nothing left."""
        with self._cv:
            while not self._jobs and not self._stopping:
                self._cv.wait()
            if not self._jobs:
                return None
        if self.wait_s:
            threading.Event().wait(self.wait_s)  # let concurrent requests join the batch
        with self._cv:
            first = self._jobs.popleft()
            batch, rows, key = [first], first.rows, first.key()
            for job in list(self._jobs):
                if job.key() == key and rows + job.rows <= self.max_rows:
                    self._jobs.remove(job)
                    batch.append(job)
                    rows += job.rows
            return batch

    def _loop(self) -> None:
        while (batch := self._take()) is not None:
            self.batches += 1
            log.debug("batch %d: %d requests", self.batches, len(batch))
            self.run(batch)
