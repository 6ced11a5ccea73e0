"""A reasoning-gym problem's statement: written from its entry's metadata, or listed whole.

A statement built from the entry's fields (:func:`pose`: ``Make 35 from 3 8 9``) is the same for
every ordering the generator shuffled the numbers into, so the held-out split
(:class:`~agon_lightning.data.holdout.HashHoldout`), which hashes statements, and the data
modules, which pose questions with it, agree on what one problem is.

Where a task's space is small, every statement its generator can draw is listed
(:data:`SPACES`): Countdown's, by folding the numbers left to right as reasoning-gym's
generator does (:func:`countdown_space`), so a held-out set can be the whole held-out part.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

from agon_lightning.game.types import Problem

#: The operators reasoning-gym's countdown generator places between two numbers.
COUNTDOWN_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def pose(template: str, entry: dict[str, Any]) -> str:
    """``template`` with each ``{field}`` replaced by that field of the entry's metadata.

    A list is written sorted, space-separated (``{numbers}`` → ``3 8 9``): a problem then has one
    statement whatever order the generator shuffled its numbers into, so the held-out filter,
    which compares statements, catches every ordering of a held-out problem.

    Raises:
        ValueError: When the template names a field the entry does not have.
    """
    meta = entry.get("metadata", {})

    def field(match: re.Match[str]) -> str:
        if match[1] not in meta:
            raise ValueError(
                f"question_format {template!r} names {{{match[1]}}}, which is not in the entry's "
                f"metadata (fields: {sorted(meta)})"
            )
        value = meta[match[1]]
        return " ".join(map(str, sorted(value))) if isinstance(value, (list, tuple)) else str(value)

    return re.sub(r"\{(\w+)\}", field, template)


def left_fold(numbers: Sequence[int], ops: Sequence[str]) -> tuple[int, str]:
    """``((n0 op1 n1) op2 n2) …``: its value and its expression, as reasoning-gym's generator
    builds a problem (each operator applies to everything before it)."""
    value, text = numbers[0], str(numbers[0])
    for op, n in zip(ops, numbers[1:]):
        value = COUNTDOWN_OPERATORS[op](value, n)
        text = f"({text}){op}{n}" if op == "*" and any(o in text for o in "+-") else f"{text}{op}{n}"
    return value, text


def countdown_space(
    count: int,
    min_value: int = 1,
    max_value: int = 9,
    min_target: int = 10,
    max_target: int = 99,
    operators: Sequence[str] = tuple(COUNTDOWN_OPERATORS),
) -> dict[tuple[int, tuple[int, ...]], str]:
    """Every statement reasoning-gym's countdown generator can draw with ``count`` numbers:
    ``(target, sorted numbers)`` → one expression that reaches it.

    The generator draws the numbers in order and an operator between each two, and folds them
    left to right; a statement is any target in range that some ordering and choice of
    operators reaches. (Its support; how often each is drawn is not uniform.)
    """
    if any(op not in COUNTDOWN_OPERATORS for op in operators):
        raise ValueError(f"operators must be among {list(COUNTDOWN_OPERATORS)}, got {list(operators)}")
    out: dict[tuple[int, tuple[int, ...]], str] = {}
    for numbers in product(range(min_value, max_value + 1), repeat=count):
        for ops in product(operators, repeat=count - 1):
            value, text = left_fold(numbers, ops)
            if min_target <= value <= max_target:
                out.setdefault((value, tuple(sorted(numbers))), text)
    return dict(sorted(out.items()))


def countdown_problems(config: dict[str, Any], question_format: str | None) -> list[Problem]:
    """Every statement of the countdown space of ``config`` (:func:`countdown_space`), as problems
    scored by reasoning-gym's own scorer."""
    if question_format is None:
        raise ValueError(
            "the countdown space is posed with a question_format (e.g. 'Make {target} from {numbers}')"
        )
    keys = {
        k: v
        for k, v in config.items()
        if k in ("min_value", "max_value", "min_target", "max_target", "operators")
    }
    problems = []
    for count in range(config.get("min_numbers", 4), config.get("max_numbers", 4) + 1):
        for (target, numbers), expression in countdown_space(count, **keys).items():
            entry = {"answer": expression, "metadata": {"source_dataset": "countdown", "numbers": list(numbers),
                                                        "target": target, "expression": expression}}  # fmt: skip
            entry["question"] = pose(question_format, entry)
            problems.append(Problem(entry["question"], expression, {"task": "countdown", "entry": entry}))
    return problems


#: Tasks whose whole space of statements can be listed: task → (config, question_format) → problems.
SPACES: dict[str, Callable[[dict[str, Any], str | None], list[Problem]]] = {"countdown": countdown_problems}
