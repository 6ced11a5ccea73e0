"""The bounded batching queue of ``agon serve``: concurrent requests become one batch of both stages.

Requests arrive on the server's event loop; one worker thread owns the model. It takes the
oldest waiting job, waits ``wait_s`` for company, and runs every waiting job that can share
its batch (same model, same sampling settings, neither seeded) up to ``max_rows`` sequences,
oldest first; the others keep their place. A job larger than a batch runs in parts of
``max_rows`` rows, and after each part it goes to the back of the queue, so requests that came
meanwhile run between its parts: one client's thousands of prompts do not hold back the next
client's one.

The queue bounds what it holds: at most ``max_pending`` jobs and ``max_tokens_in_flight`` completion tokens
(prompts x n x max_tokens, summed over queued and running jobs). A job larger than
``max_tokens_in_flight`` alone is refused with a 400; one that fits but not beside the work in flight, or a
job beyond ``max_pending``, with a 503 and ``Retry-After`` (OpenAI's answer when it is overloaded;
its client retries), instead of letting latency and memory grow without bound. On the vLLM
backend the same queue hands each group to the engine in one call, where vLLM's scheduler
batches it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from agon_lightning.deploy.serve_api import APIError
from agon_lightning.deploy.serve_engine import Job, Part

log = logging.getLogger(__name__)


DEFAULT_MAX_TOKENS_IN_FLIGHT = 2**20


class QueueFull(APIError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            503,
            f"the server is at capacity ({limit} requests waiting, agon serve --max-queue); retry shortly",
            type="server_overloaded",
            code="queue_full",
        )


class TokensInFlightFull(APIError):
    def __init__(self, asked: int, in_flight: int, limit: int) -> None:
        super().__init__(
            503,
            f"the server is at capacity: {in_flight} tokens are in flight and this request asks for {asked} "
            f"more (agon serve --max-tokens-in-flight {limit}); retry shortly",
            type="server_overloaded",
            code="tokens_in_flight_full",
        )


def too_many_tokens(job: Job, limit: int) -> APIError:
    """The 400 for a job that alone asks for more than the queue ever holds."""
    return APIError(
        400,
        f"this request asks for {job.tokens} tokens ({len(job.questions)} prompts x n={job.n} x "
        f"max_tokens={job.sampling.max_tokens}), more than this server holds in flight "
        f"(agon serve --max-tokens-in-flight {limit}); send fewer prompts, a lower n or a lower max_tokens",
        param="prompt",
        code="request_too_large",
    )


class BatchQueue:
    """Jobs waiting for the worker, at most ``max_pending``.

    Args:
        run: Runs one batch and settles each job's future (:meth:`CascadeRunner.run`).
        max_rows: Most sequences (questions × n) in one batch; a larger job runs in parts.
        max_pending: Most jobs waiting; one more is refused with :class:`QueueFull`.
        wait_s: How long the worker waits for more jobs before running a batch.
        max_tokens_in_flight: Most completion tokens (prompts × n × max_tokens) of the jobs queued and running;
            a job over it alone is a 400, one that does not fit beside them :class:`TokensInFlightFull`.
    """

    def __init__(
        self,
        run: Callable[[list[Part]], None],
        max_rows: int = 32,
        max_pending: int = 256,
        wait_s: float = 0.005,
        max_tokens_in_flight: int = DEFAULT_MAX_TOKENS_IN_FLIGHT,
    ) -> None:
        if min(max_rows, max_pending, max_tokens_in_flight) < 1 or wait_s < 0:
            raise ValueError(
                "max_rows, max_pending and max_tokens_in_flight must be >= 1 and wait_s >= 0, got "
                f"{max_rows}, {max_pending}, {max_tokens_in_flight}, {wait_s}"
            )
        self.run, self.max_rows, self.max_pending, self.wait_s = run, max_rows, max_pending, wait_s
        self.max_tokens_in_flight = max_tokens_in_flight
        self.tokens = 0  # completion tokens of the jobs queued and running
        self._jobs: deque[Job] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="agon-serve-worker", daemon=True)
        self.batches = 0  # batches run so far (for tests and logs)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> Job:
        """Queue ``job``.

        Raises:
            APIError: 400 when the job alone asks for more than ``max_tokens_in_flight``; 503 when stopping,
                when ``max_pending`` jobs wait (:class:`QueueFull`) or when it does not fit beside
                the tokens in flight (:class:`TokensInFlightFull`).
        """
        if job.tokens > self.max_tokens_in_flight:
            raise too_many_tokens(job, self.max_tokens_in_flight)
        with self._cv:
            if self._stopping:
                raise APIError(503, "the server is shutting down", type="server_error", code="shutting_down")
            if len(self._jobs) >= self.max_pending:
                raise QueueFull(self.max_pending)
            if self.tokens + job.tokens > self.max_tokens_in_flight:
                raise TokensInFlightFull(job.tokens, self.tokens, self.max_tokens_in_flight)
            self.tokens += job.tokens
            self._jobs.append(job)
            self._cv.notify()
        job.future.add_done_callback(lambda _: self._release(job.tokens))
        return job

    def _release(self, tokens: int) -> None:
        with self._cv:
            self.tokens -= tokens

    def stop(self, timeout: float | None = None) -> None:
        """Finish the jobs already queued, then end the worker."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _take(self) -> list[Part] | None:
        """The next batch: the oldest job's next part, and whole jobs that fit beside it; ``None`` once
        stopping with nothing left."""
        with self._cv:
            while not self._jobs and not self._stopping:
                self._cv.wait()
            if not self._jobs:
                return None
        if self.wait_s:
            threading.Event().wait(self.wait_s)  # let concurrent requests join the batch
        with self._cv:
            for done in [j for j in self._jobs if j.future.done()]:  # failed or cancelled: nothing to run
                self._jobs.remove(done)
            if not self._jobs:
                return []
            first = self._jobs.popleft()
            batch = [first.take(self.max_rows)]
            if first.remaining:  # the batch is full; the rest waits behind the jobs queued meanwhile
                self._jobs.append(first)
                return batch
            rows, key = batch[0].rows, first.key()
            for job in list(self._jobs):
                if job.key() == key and rows + job.remaining <= self.max_rows:
                    self._jobs.remove(job)
                    batch.append(job.take(job.remaining))
                    rows += batch[-1].rows
            return batch

    def _loop(self) -> None:
        while (batch := self._take()) is not None:
            if not batch:
                continue
            self.batches += 1
            log.debug("batch %d: %d requests", self.batches, len(batch))
            self.run(batch)
