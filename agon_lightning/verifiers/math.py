"""Math answers checked with math-verify, every check bounded in a worker process.

Grading follows the DeepMath authors' reward: only the text after the last ``</think>``
counts; its last ``\\boxed{…}`` is the answer; the gold answer is wrapped as ``\\boxed{gold}``
and passed to math-verify *first* (its comparison is not symmetric). ``answer="tag"`` reads the
answer from the last finished ``<answer>…</answer>`` instead, as the Agon paper does; either
way the answer goes to math-verify wrapped in ``\\boxed{}``.

Why worker processes: math-verify bounds its own work with ``SIGALRM``, which works only in
the main thread of the main interpreter, not wherever a trainer happens to call a verifier.
So each check runs in a :class:`~agon_lightning.infra.workers.BoundedPool` worker with math-verify's
timeouts switched off; past ``timeout_s`` that worker is killed and replaced and the answer is
ruled wrong with reason ``"timeout"``. A batch is checked by all workers in parallel.

The pool is created on first use, left behind when the verifier is pickled (DDP spawn,
checkpoints) or forked (dataloader workers), where the copy starts its own, and shut down by
:meth:`MathVerifier.close`, at garbage collection or at interpreter exit, whichever comes first.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any, Literal

from agon_lightning.game.text import THINK_CLOSE, after_thinking, answer_tag_span, last_boxed_span
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.infra.workers import BoundedPool
from agon_lightning.verifiers.base import Verifier

log = logging.getLogger(__name__)

ANSWER_PLACES = ("tag", "boxed")


def grade(
    gold: str,
    tail: str,
    float_rounding: int,
    numeric_precision: int,
    strict: bool,
    answer: Literal["tag", "boxed"] = "boxed",
) -> tuple[str, str | None]:
    """``(reason, extracted)`` of the text after the trace: ``"ok"``, ``"wrong_answer"``, ``"no_answer"``.

    The answer is the last ``\\boxed{…}`` of ``tail`` (``answer="boxed"``) or its last
    ``<answer>…</answer>`` (``"tag"``); ``\\boxed{gold}`` goes to math-verify first. Runs
    unbounded (even finding the box is quadratic in a degenerate tail): call it in a worker
    the caller can kill.
    """
    span = answer_tag_span(tail) if answer == "tag" else last_boxed_span(tail)
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


def warm_up() -> None:
    """Run in each fresh worker before it takes checks: load the LaTeX grammar (start-up is not check time)."""
    # We bound time ourselves; math-verify's "timeout is disabled" warning is noise here.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    grade("1", "\\boxed{1.0}", 6, 15, True)


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
        answer: Where the answer is read from, after the trace: ``"boxed"`` (default), the
            last ``\\boxed{…}``, as in the DeepMath authors' reward and Qwen3's own habit, so
            the verifier grades what DeepMath's R1 solutions and an un-prompted Qwen3 write;
            ``"tag"``, the last ``<answer>…</answer>``, as the Agon paper parses it (its
            configs ask for the tag in the prompt and set this).
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        num_workers: int | None = None,
        require_thinking: bool = True,
        float_rounding: int = 6,
        numeric_precision: int = 15,
        strict: bool = True,
        answer: Literal["tag", "boxed"] = "boxed",
    ) -> None:
        if answer not in ANSWER_PLACES:
            raise ValueError(f"answer must be one of {ANSWER_PLACES}, got {answer!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers must be >= 1 or None (automatic), got {num_workers}")
        self.answer = answer
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
        options = (self.float_rounding, self.numeric_precision, self.strict, self.answer)
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
            self._pool = BoundedPool(self.num_workers, self.timeout_s, warm_up=f"{__name__}:warm_up")
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
