"""Plain data that flows between the components: a problem, and a verifier's verdict.

Every component speaks in these two types, so a new domain (a new verifier, a new data
module) needs nothing from the trainer beyond them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SPLIT = "split"  # Problem.metadata key naming a held-out split (``"hard"``); absent: the main one


@dataclass
class Problem:
    """One task as the data module yields it.

    Attributes:
        question: The problem statement, without any chat template or instruction wrapper.
        answer: The gold answer (a string) when the domain has one; code problems keep their
            tests in ``metadata`` instead.
        metadata: Anything a verifier needs (a reasoning-gym entry, test cases, an id); under
            :data:`SPLIT`, the held-out split the problem is reported in.
    """

    question: str
    answer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Verdict:
    """What a verifier says of one completion.

    Attributes:
        correct: The binary reward c(·) the game is built on.
        score: A graded score in [0, 1] (partial credit, fraction of tests passed); logged,
            never used as the reward unless a reward component chooses to.
        reason: Why, in a word or two: ``"ok"``, ``"wrong_answer"``, ``"no_answer"``, …
        extracted: The answer the verifier read from the completion, if any.
    """

    correct: bool
    score: float = 0.0
    reason: str = ""
    extracted: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"Verdict.score must be in [0, 1], got {self.score!r}")
