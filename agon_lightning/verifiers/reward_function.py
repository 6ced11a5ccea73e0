"""A TRL-style reward function as a verifier: ``f(prompts, completions, **columns) -> list[float]``.

TRL's ``GRPOTrainer`` calls each reward function on a batch with the prompts, the completions
and every other dataset column as a keyword list; this verifier calls the same function the
same way, so a reward written for TRL plugs in unchanged, chosen from YAML by import path::

    verifier:
      class_path: agon_lightning.verifiers.reward_function.RewardFunctionVerifier
      init_args: {function: my_pkg.rewards.accuracy, threshold: 1.0, answer_column: solution}

How our :class:`~agon_lightning.types.Problem` maps onto TRL's columns: ``prompts`` are the
questions (``Problem.question``, before any template), ``completions`` the model's texts;
``Problem.answer`` is passed under ``answer_column`` (``answer`` by default; TRL's own
``accuracy_reward`` reads ``solution``), and each key of ``Problem.metadata`` as a column of its
own (``None`` in the rows that lack it). With ``conversational: true`` prompts and completions
come in TRL's conversational format (``[{"role": "user", "content": …}]`` and
``[{"role": "assistant", "content": …}]``). A verifier judges text, so ``completion_ids``,
``trainer_state``, ``log_extra`` and ``log_metric`` are not passed: a function that requires one
by name is refused when the verifier is built. ``async def`` functions (and callable objects
with an async ``__call__``) are awaited.

The game needs 0/1 correctness: a reward ``>= threshold`` is correct. The reward itself is
kept in :attr:`Verdict.score`, rescaled from ``score_range`` to [0, 1] (clipped), for reward
components that use scores. ``None`` (TRL's "does not apply") or NaN is wrong, reason
``no_reward``. A function that raises on some rows marks those rows wrong (the error logged and
named in the reason); one that raises on every row of a batch is a bug, and the error is raised.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import inspect
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from agon_lightning.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier

log = logging.getLogger(__name__)

NOT_PASSED = ("completion_ids", "trainer_state", "log_extra", "log_metric", "environments")


def import_function(path: str) -> Callable[..., Any]:
    """The callable at ``path`` (``package.module.name`` or ``package.module:name``).

    Raises:
        ValueError: the path names no module, no attribute of it, or something not callable.
    """
    module_name, sep, name = path.replace(":", ".").rpartition(".")
    if not sep or not module_name:
        raise ValueError(f"function must be an import path like my_pkg.rewards.accuracy, got {path!r}")
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import reward function {path!r}: {err}") from err
    if not callable(obj):
        raise ValueError(f"{path!r} is a {type(obj).__name__}, not a callable reward function")
    return obj


def call_reward(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """``fn(**kwargs)``, awaited when it returns an awaitable (in a thread of its own under a running loop)."""
    result = fn(**kwargs)
    if not inspect.isawaitable(result):
        return result

    async def wait() -> Any:
        return await result

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop in this thread: the usual case
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, wait()).result()


class RewardFunctionVerifier(Verifier):
    """Correct where a TRL-style reward function's reward reaches ``threshold``.

    Args:
        function: Import path of the reward function (or, from Python, the callable itself).
        threshold: Smallest reward counted as correct.
        score_range: ``(low, high)`` of the function's rewards, mapped onto ``Verdict.score``'s [0, 1].
        answer_column: Keyword under which ``Problem.answer`` is passed.
        conversational: Pass prompts and completions as TRL's conversational messages.
    """

    def __init__(
        self,
        function: str | Callable[..., Any],
        threshold: float = 1.0,
        score_range: tuple[float, float] = (0.0, 1.0),
        answer_column: str = "answer",
        conversational: bool = False,
    ) -> None:
        low, high = score_range
        if not low < high:
            raise ValueError(f"score_range must be (low, high) with low < high, got {score_range!r}")
        if not answer_column.isidentifier():
            raise ValueError(f"answer_column must be a keyword name, got {answer_column!r}")
        fn = import_function(function) if isinstance(function, str) else function
        if not callable(fn):
            raise ValueError(f"function must be an import path or a callable, got {function!r}")
        self._check_signature(fn)
        self._fn = fn
        # What the bundle records: an import path, so a deployed bundle rebuilds the same verifier.
        self.function = function if isinstance(function, str) else _path_of(fn)
        self.threshold = float(threshold)
        self.score_range = (float(low), float(high))
        self.answer_column = answer_column
        self.conversational = conversational

    @staticmethod
    def _check_signature(fn: Callable[..., Any]) -> None:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature: nothing to check
            return
        needed = [
            p.name for p in params if p.name in NOT_PASSED and p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        ]  # fmt: skip
        if needed:
            raise ValueError(
                f"reward function {_path_of(fn)} requires {needed}, which a verifier cannot pass (it judges "
                f"text only); give them a default or read them from **kwargs"
            )

    def columns(self, problems: Sequence[Problem]) -> dict[str, list[Any]]:
        """The keyword lists the function receives besides ``prompts`` and ``completions``."""
        out: dict[str, list[Any]] = {self.answer_column: [p.answer for p in problems]}
        keys = dict.fromkeys(k for p in problems for k in p.metadata)
        for key in keys:
            if key in out or key in ("prompts", "completions"):
                continue
            out[key] = [p.metadata.get(key) for p in problems]
        return out

    def rewards(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[Any]:
        """One reward per completion from one call of the function (TRL's batch call)."""
        prompts: list[Any] = [p.question for p in problems]
        texts: list[Any] = list(completions)
        if self.conversational:
            prompts = [[{"role": "user", "content": q}] for q in prompts]
            texts = [[{"role": "assistant", "content": c}] for c in texts]
        out = call_reward(self._fn, prompts=prompts, completions=texts, **self.columns(problems))
        if not isinstance(out, Sequence) or isinstance(out, str) or len(out) != len(texts):
            got = (
                f"{len(out)} values" if isinstance(out, Sequence) and not isinstance(out, str) else repr(out)
            )
            raise ValueError(
                f"reward function {self.function} must return one reward per completion: {len(texts)} expected, "
                f"got {got}"
            )
        return list(out)

    def verdict(self, reward: Any) -> Verdict:
        """A reward as a verdict: correct at ``threshold``, the score rescaled to [0, 1]."""
        if reward is None or (isinstance(reward, float) and math.isnan(reward)):
            return Verdict(correct=False, score=0.0, reason="no_reward")
        try:
            value = float(reward)
        except (TypeError, ValueError):
            raise ValueError(f"reward function {self.function} returned {reward!r}, not a number") from None
        low, high = self.score_range
        score = min(max((value - low) / (high - low), 0.0), 1.0)
        ok = value >= self.threshold
        return Verdict(correct=ok, score=score, reason="ok" if ok else "wrong_answer")

    def verify(self, completion: str, problem: Problem) -> Verdict:
        return self.verify_batch([completion], [problem])[0]

    def verify_batch(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[Verdict]:
        if len(completions) != len(problems):
            raise ValueError(
                f"verify_batch needs one problem per completion: {len(completions)} and {len(problems)}"
            )
        try:
            return [self.verdict(r) for r in self.rewards(completions, problems)]
        except Exception as err:  # noqa: BLE001 — retried row by row below: which rows does it fail on?
            if len(completions) == 1:
                raise
            batch_error = err
        verdicts, failures = [], 0
        for i, (completion, problem) in enumerate(zip(completions, problems)):
            try:
                verdicts.append(self.verdict(self.rewards([completion], [problem])[0]))
            except Exception as err:  # noqa: BLE001 — this row is wrong; the error is logged and kept
                failures += 1
                log.warning(
                    "reward function %s failed on row %d: %s: %s", self.function, i, type(err).__name__, err
                )
                verdicts.append(
                    Verdict(correct=False, score=0.0, reason=f"reward_error: {type(err).__name__}: {err}")
                )
        if failures == len(completions):
            raise batch_error
        return verdicts


def _path_of(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a function (a partial's or a callable object's underlying one)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    target = fn if inspect.isfunction(fn) or inspect.isclass(fn) else type(fn)
    return f"{target.__module__}.{target.__qualname__}"
