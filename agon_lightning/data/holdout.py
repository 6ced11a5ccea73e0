"""A held-out part of a task's problem space, fixed by a hash of each problem's canonical statement.

A held-out set drawn from the same generator as training, with every held-out statement then
dropped from training, has two faults: its size decides what is left to train on (a large
held-out set takes the frequent problems, and training is left with the generator's rare
tail), and any other consumer of the generator (an SFT data set) must repeat the same drop to
stay clean. A hash split has neither. A problem is held out when the hash of its canonical
statement, read as a number in [0, 1), is below ``fraction``: the rule is the problem's own,
whichever generator, seed or consumer drew it, so RL training and SFT data built with the same
:class:`HashHoldout` can never draw a held-out problem, and the held-out part is a fixed share
of the space, however many problems are evaluated.

The canonical statement is ``key_format`` written from the entry's metadata (lists sorted, as
:func:`~agon_lightning.data.statements.pose` writes them), prefixed by the task name: for
Countdown, ``countdown|35|3 8 9`` for every ordering of the numbers and every wording.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agon_lightning.data.statements import pose
from agon_lightning.game.types import Problem

#: The Countdown statement: the target and the sorted numbers.
COUNTDOWN_KEY = "{target}|{numbers}"


def unit_hash(text: str, salt: str) -> float:
    """``text`` hashed with ``salt`` (SHA-256) to a number in [0, 1): the first 8 bytes over 2**64."""
    digest = hashlib.sha256(f"{salt}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class HashHoldout:
    """The held-out part of the space: problems whose canonical statement hashes below ``fraction``.

    Args:
        fraction: The share of the space held out, in (0, 1).
        salt: Mixed into the hash; another salt is another split of the same space.
        key_format: The canonical statement, written from the entry's metadata
            (``{field}``; a list is written sorted); ``None``: the problem's question as posed.
    """

    def __init__(
        self, fraction: float = 0.4, salt: str = "agon-s2", key_format: str | None = COUNTDOWN_KEY
    ) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fraction must be in (0, 1), got {fraction}")
        if not salt:
            raise ValueError("salt must be a non-empty string")
        self.fraction = fraction
        self.salt = salt
        self.key_format = key_format

    def statement(self, problem: Problem) -> str:
        """The canonical statement of ``problem``: ``task|key_format`` from its reasoning-gym entry."""
        task = problem.metadata.get("task", "")
        if self.key_format is None:
            return f"{task}|{problem.question}"
        entry: dict[str, Any] | None = problem.metadata.get("entry")
        if entry is None:
            raise ValueError(
                f"HashHoldout(key_format={self.key_format!r}) needs the problem's reasoning-gym entry "
                f"(metadata['entry']); the problem {problem.question!r} has keys {sorted(problem.metadata)}"
            )
        return f"{task}|{pose(self.key_format, entry)}"

    def position(self, problem: Problem) -> float:
        """Where ``problem`` falls in [0, 1); held out below ``fraction``, and evaluated in this order."""
        return unit_hash(self.statement(problem), self.salt)

    def held_out(self, problem: Problem) -> bool:
        return self.position(problem) < self.fraction

    def __repr__(self) -> str:
        return f"HashHoldout(fraction={self.fraction}, salt={self.salt!r}, key_format={self.key_format!r})"


def distinct(problems: list[Problem], holdout: HashHoldout) -> list[Problem]:
    """``problems`` with each canonical statement once (its first draw), in hash order."""
    seen: dict[str, Problem] = {}
    for p in problems:
        seen.setdefault(holdout.statement(p), p)
    return sorted(seen.values(), key=holdout.position)
