"""TRL reward functions as a verifier: ``f(prompts, completions, **columns) -> list[float | None]``.

TRL's ``GRPOTrainer`` calls each of its ``reward_funcs`` once per batch with the prompts, the
completions and every other dataset column as a keyword list, and sums their values with
``reward_weights``; this verifier makes the same calls, so rewards written for TRL plug in
unchanged, chosen from YAML by import path::

    verifier:
      class_path: agon_lightning.verifiers.reward_function.RewardFunctionVerifier   # or: reward_function
      init_args:
        reward_funcs: [my_pkg.rewards.accuracy, my_pkg.rewards.format]
        reward_weights: [1.0, 0.5]
        correct_if: accuracy      # c = accuracy >= threshold: what the conversion bonus reads
    reward: GradedReward        # pays the weighted sum (--model.reward=graded)

What the functions receive: ``prompts`` as the dataset holds them (chat messages for a
conversational prompt, ``Problem.messages``; the text otherwise), ``completions`` as TRL passes
them (``[{"role": "assistant", "content": …}]`` for a conversational prompt, the text otherwise),
and every column of the row (``Problem.metadata``) under its own name, ``None`` in rows that lack
it; ``Problem.answer`` goes under ``answer_column`` in rows with no such column. A verifier judges
text, so ``completion_ids``, ``trainer_state``, ``log_extra`` and ``log_metric`` are not passed: a
function that requires one is refused when the verifier is built. ``async def`` functions (and
callable objects with an async ``__call__``) are awaited.

What comes back: ``None`` (TRL's "does not apply") or NaN drops out of the weighted sum, as TRL's
nansum; each value is kept by function name in :attr:`Verdict.rewards` and the sum in
:attr:`Verdict.reward`. The game needs 0/1 correctness c, read from one rule: the ``correct_if``
value (a function's, or ``total``) ``>= threshold``; ``None`` there is wrong (reason
``no_reward``). A function that returns ``None`` for every completion of a batch is named in a
warning, once, and each step logs its share of ``None`` as ``reward/<name>/none_share``. A function
that raises on some rows marks those rows wrong (the error logged and named in the reason); one
that raises on every row of a batch is a bug, and the error is raised.
A function needing a column the data lacks, or holds only as ``None``, is refused when training
starts (:meth:`RewardFunctionVerifier.check_problems`): never a silent 0. No gold answer is needed:
a problem is graded when it has every column the functions require (:meth:`~RewardFunctionVerifier.grades`).
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

from agon_lightning.game.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier

log = logging.getLogger(__name__)

NOT_PASSED = ("completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
TOTAL = "total"  # correct_if: the weighted sum decides c


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
    """TRL reward functions as a verifier: each called once per batch, their weighted sum kept.

    Args:
        reward_funcs: One reward function or a list (TRL's ``reward_funcs``): import paths or, from
            Python, the callables themselves.
        reward_weights: One weight per function (TRL's ``reward_weights``; default 1 each).
        correct_if: Which value decides the game's 0/1 correctness c: a function's name (default:
            the first function's) or ``total`` for the weighted sum.
        threshold: c = 1 where that value is ``>= threshold``; a ``None`` value is wrong.
        score_range: ``(low, high)`` of the ``correct_if`` value, mapped onto ``Verdict.score``'s [0, 1].
        answer_column: Keyword under which ``Problem.answer`` is passed, in the rows whose metadata has
            no column of that name (a real column is never replaced).
        conversational: Pass prompts and completions as TRL's chat messages; ``None`` (default):
            for the problems whose prompt is chat messages (``Problem.messages``), as TRL does.
        function: The older name of ``reward_funcs`` for one function (bundles written before keep it).
    """

    def __init__(
        self,
        # Import paths in the signature (what a config holds, and what --print_config and config.yaml write
        # back); from Python, callables too.
        reward_funcs: str | list[str] | None = None,
        reward_weights: Sequence[float] | None = None,
        correct_if: str | None = None,
        threshold: float = 1.0,
        score_range: tuple[float, float] = (0.0, 1.0),
        answer_column: str = "answer",
        conversational: bool | None = None,
        function: str | None = None,
    ) -> None:
        if (reward_funcs is None) == (function is None):
            raise ValueError(
                "give reward_funcs (one reward function or a list: import paths or callables); "
                f"function is its older name for one, not both (got reward_funcs={reward_funcs!r}, "
                f"function={function!r})"
            )
        given = function if reward_funcs is None else reward_funcs
        funcs = [given] if isinstance(given, str) or callable(given) else list(given)
        if not funcs:
            raise ValueError("reward_funcs is empty: give at least one reward function")
        weights = [1.0] * len(funcs) if reward_weights is None else [float(w) for w in reward_weights]
        if len(weights) != len(funcs):
            raise ValueError(
                f"reward_weights has {len(weights)} values for {len(funcs)} reward functions; give one per function"
            )
        low, high = score_range
        if not low < high:
            raise ValueError(f"score_range must be (low, high) with low < high, got {score_range!r}")
        if not answer_column.isidentifier():
            raise ValueError(f"answer_column must be a keyword name, got {answer_column!r}")
        self._fns: list[Callable[..., Any]] = []
        for f in funcs:
            fn = import_function(f) if isinstance(f, str) else f
            if not callable(fn):
                raise ValueError(f"a reward function must be an import path or a callable, got {f!r}")
            self._check_signature(fn)
            self._fns.append(fn)
        self._names = unique_names([_name_of(fn) for fn in self._fns])
        if correct_if is not None and correct_if not in (*self._names, TOTAL):
            raise ValueError(f"correct_if must be one of {[*self._names, TOTAL]}, got {correct_if!r}")
        # What the bundle records: import paths, so a deployed bundle rebuilds the same verifier.
        self.reward_funcs = [f if isinstance(f, str) else _path_of(fn) for f, fn in zip(funcs, self._fns)]
        self.reward_weights = weights
        self.correct_if = correct_if or self._names[0]
        self.threshold = float(threshold)
        self.score_range = (float(low), float(high))
        self.answer_column = answer_column
        self.conversational = conversational
        self._told_none: set[str] = set()  # functions that returned None for a whole batch: said once each

    @property
    def names(self) -> list[str]:
        """Each function's name, as its values are logged (``reward/<name>/mean``) and kept in ``Verdict.rewards``."""
        return list(self._names)

    @property
    def function(self) -> str:
        """The first function's import path (the single function of older configs)."""
        return self.reward_funcs[0]

    @property
    def graded(self) -> bool:
        """Whether the reward is more than 0/1 correctness: several functions, or a weight other than 1."""
        return len(self._fns) > 1 or self.reward_weights != [1.0]

    def grades(self, problem: Problem) -> bool:
        """Whether every column the functions require is in ``problem`` (no gold answer is needed).

        A question asked without its columns (a bare string at deployment) is left ungraded
        rather than sent to a function that would fail on it.
        """
        columns = self.columns([problem])
        return all(columns.get(name, [None])[0] is not None for _, name in self._required_columns())

    def _required_columns(self) -> list[tuple[str, str]]:
        """``(function path, column)`` for each column a function cannot be called without."""
        return [
            (path, name)
            for fn, path in zip(self._fns, self.reward_funcs)
            for name in required_keywords(fn)
            if name not in ("prompts", "completions") and name not in NOT_PASSED
        ]

    @staticmethod
    def _check_signature(fn: Callable[..., Any]) -> None:
        needed = [n for n in required_keywords(fn) if n in NOT_PASSED]
        if needed:
            raise ValueError(
                f"reward function {_path_of(fn)} requires {needed}, which a verifier cannot pass (it judges "
                f"text only); give them a default or read them from **kwargs"
            )

    def columns(self, problems: Sequence[Problem]) -> dict[str, list[Any]]:
        """The keyword lists the functions receive besides ``prompts`` and ``completions``.

        Every metadata column under its own name (``None`` in the rows that lack it), and
        ``Problem.answer`` under ``answer_column`` in the rows that have no such column.
        """
        keys = dict.fromkeys(k for p in problems for k in p.metadata if k not in ("prompts", "completions"))
        out: dict[str, list[Any]] = {key: [p.metadata.get(key) for p in problems] for key in keys}
        col = self.answer_column
        out[col] = [p.metadata[col] if col in p.metadata else p.answer for p in problems]
        return out

    def _is_conversational(self, problems: Sequence[Problem]) -> list[bool]:
        if self.conversational is not None:
            return [self.conversational] * len(problems)
        return [getattr(p, "messages", None) is not None for p in problems]

    def rewards(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[list[Any]]:
        """``[function][row]``: each function's rewards, from one call per function (TRL's batch call)."""
        chat = self._is_conversational(problems)
        prompts: list[Any] = [
            (getattr(p, "messages", None) or [{"role": "user", "content": p.question}]) if c else p.question
            for p, c in zip(problems, chat)
        ]
        texts: list[Any] = [
            [{"role": "assistant", "content": t}] if c else t for t, c in zip(completions, chat)
        ]
        columns = self.columns(problems)
        out = []
        for fn, path in zip(self._fns, self.reward_funcs):
            values = call_reward(fn, prompts=prompts, completions=texts, **columns)
            if not isinstance(values, Sequence) or isinstance(values, str) or len(values) != len(texts):
                got = (
                    f"{len(values)} values"
                    if isinstance(values, Sequence) and not isinstance(values, str)
                    else repr(values)
                )
                raise ValueError(
                    f"reward function {path} must return one reward per completion: {len(texts)} expected, got {got}"
                )
            out.append([self._number(v, path) for v in values])
        return out

    @staticmethod
    def _number(value: Any, path: str) -> float | None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"reward function {path} returned {value!r}, not a number or None") from None

    def verdict(self, values: Sequence[float | None]) -> Verdict:
        """One completion's function values as a verdict: the weighted sum, and c by ``correct_if``."""
        named = dict(zip(self.names, values))
        applying = [(w, v) for w, v in zip(self.reward_weights, values) if v is not None]
        total = sum(w * v for w, v in applying) if applying else None
        decisive = total if self.correct_if == TOTAL else named[self.correct_if]
        if decisive is None:
            return Verdict(correct=False, score=0.0, reason="no_reward", rewards=named, reward=total)
        low, high = self.score_range
        score = min(max((decisive - low) / (high - low), 0.0), 1.0)
        ok = decisive >= self.threshold
        return Verdict(
            correct=ok, score=score, reason="ok" if ok else "wrong_answer", rewards=named, reward=total
        )

    def verify(self, completion: str, problem: Problem) -> Verdict:
        return self.verify_batch([completion], [problem])[0]

    def verify_batch(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[Verdict]:
        if len(completions) != len(problems):
            raise ValueError(
                f"verify_batch needs one problem per completion: {len(completions)} and {len(problems)}"
            )
        try:
            table = self.rewards(completions, problems)
            self._tell_if_none(table)
            return [self.verdict([column[i] for column in table]) for i in range(len(completions))]
        except Exception as err:  # noqa: BLE001 — retried row by row below: which rows does it fail on?
            if len(completions) == 1:
                raise
            batch_error = err
        verdicts, failures = [], 0
        for i, (completion, problem) in enumerate(zip(completions, problems)):
            try:
                verdicts.append(self.verdict([column[0] for column in self.rewards([completion], [problem])]))
            except Exception as err:  # noqa: BLE001 — this row is wrong; the error is logged and kept
                failures += 1
                log.warning(  # every function is named: the first one need not be the one that raised
                    "row %d failed in the reward functions (%s): %s: %s",
                    i, ", ".join(self.reward_funcs), type(err).__name__, err,
                )  # fmt: skip
                verdicts.append(
                    Verdict(correct=False, score=0.0, reason=f"reward_error: {type(err).__name__}: {err}")
                )
        if failures == len(completions):
            raise batch_error
        return verdicts

    def _tell_if_none(self, table: list[list[float | None]]) -> None:
        """Warn once per function that returned ``None`` (or NaN) for every completion of a batch: it paid nothing."""
        for path, name, values in zip(self.reward_funcs, self.names, table):
            if values and name not in self._told_none and all(v is None for v in values):
                self._told_none.add(name)
                decides = name == self.correct_if
                wrong = "; it decides c (correct_if), so every one counted as wrong" if decides else ""
                log.warning(
                    "reward function %s returned None (does not apply) for all %d completions of a batch: it "
                    "paid nothing there%s. Each step logs the share as reward/%s/none_share. Return a number "
                    "where the function applies, or check the columns it reads (said once per function)",
                    path, len(values), wrong, name,
                )  # fmt: skip

    def check_problems(self, problems: Sequence[Problem], where: str = "the training problems") -> None:
        """Refuse, at start, a function that needs a column these problems lack or hold only as ``None``.

        Raises:
            ValueError: names the function, the column and the columns there are.
        """
        if not problems:
            return
        columns = self.columns(problems)
        for path, name in self._required_columns():
            values = columns.get(name)
            if values is None or all(v is None for v in values):
                state = "is None in every row of" if values is not None else "is no column of"
                raise ValueError(
                    f"reward function {path} needs the column {name!r}, which {state} {where} "
                    f"({len(problems)} problems; columns: {sorted(columns)}); rename the column in the data, "
                    "or give the function's parameter a default"
                )


def required_keywords(fn: Callable[..., Any]) -> list[str]:
    """The parameters ``fn`` cannot be called without (no default, not ``*args``/``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return []
    return [
        p.name for p in params
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]  # fmt: skip


def unique_names(names: Sequence[str]) -> list[str]:
    """``names`` with repeats numbered (``accuracy``, ``accuracy_2``), so each logs under its own key."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


def _name_of(fn: Callable[..., Any]) -> str:
    """A function's name as TRL logs it: ``__name__`` (a partial's or a callable object's underlying one)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", None) or type(fn).__name__


def _path_of(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a function (a partial's or a callable object's underlying one)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    target = fn if inspect.isfunction(fn) or inspect.isclass(fn) else type(fn)
    return f"{target.__module__}.{target.__qualname__}"
