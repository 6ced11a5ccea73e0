"""SFT examples for arithmetic: the worked solutions of :mod:`.traces`, in both roles' prompts.

Each problem becomes one example: the drafter's (the plain problem prompt) or, by a seeded draw,
the challenger's (the problem plus a rival's summary), where the rival's draft is right, has a
slipped step, wrote up only part of its work, or was cut off inside its trace — every summary a
challenger can meet in RL. The target is always the correct worked solution. Held-out problems
are evaluated once in each role.
"""

from __future__ import annotations

import random

from agon_lightning.game.types import Problem
from agon_lightning.testbeds.chain_sum.traces import (
    corrupted_completion,
    evaluate,
    format_completion,
    problem_expression,
    target_completion,
)
from agon_lightning.training.sft_data import RIVALS, SFTExample, SFTExamples

DEFAULT_RIVAL_MIX = {"right": 0.3, "slipped": 0.4, "partial": 0.15, "empty": 0.15}


def rival_draft(problem: Problem, rival: str, rng: random.Random) -> str:
    """A rival's draft of ``problem`` of the given kind (see :data:`RIVALS`).

    ``partial`` writes up only its first intermediate result; ``empty`` is the correct draft cut
    off inside its trace, which has no summary to show.
    """
    if rival == "right":
        return target_completion(problem)
    if rival == "slipped":
        return corrupted_completion(problem, rng)
    if rival == "partial":
        steps, value = evaluate(problem_expression(problem))
        return format_completion(steps, str(value), summary_steps=1)
    if rival == "empty":
        target = target_completion(problem)
        return target[: rng.randint(len("<think>"), target.index("</think>"))]
    raise ValueError(f"unknown rival kind {rival!r}; expected one of {RIVALS}")


def build_examples(
    problems: list[Problem], challenge_fraction: float, rival_mix: dict[str, float], seed: int
) -> list[SFTExample]:
    """One example per problem; a seeded draw makes it a challenger example, with a rival drawn from ``rival_mix``."""
    rng = random.Random(seed)
    kinds, weights = list(rival_mix), list(rival_mix.values())
    examples = []
    for problem in problems:
        target = target_completion(problem)
        if rng.random() >= challenge_fraction:
            examples.append(SFTExample(problem, target))
            continue
        rival = rng.choices(kinds, weights)[0]
        examples.append(SFTExample(problem, target, rival_draft(problem, rival, rng), rival))
    return examples


def eval_examples(problems: list[Problem], seed: int) -> list[SFTExample]:
    """Every problem once as a drafter, once as a challenger (the rival kinds in turn)."""
    rng = random.Random(seed)
    drafts = [SFTExample(p, target_completion(p)) for p in problems]
    challenges = []
    for i, d in enumerate(drafts):
        rival = RIVALS[i % len(RIVALS)]
        challenges.append(SFTExample(d.problem, d.target, rival_draft(d.problem, rival, rng), rival))
    return drafts + challenges


class ArithmeticExamples(SFTExamples):
    """The arithmetic worked solutions as SFT examples (``agon sft``'s default examples).

    Args:
        challenge_fraction: Share of training examples in the challenger's prompt format.
        rival_mix: Rival kind (``right``, ``slipped``, ``partial``, ``empty``) → share of the
            challenger examples (``None``: :data:`DEFAULT_RIVAL_MIX`).
    """

    def __init__(self, challenge_fraction: float = 0.5, rival_mix: dict[str, float] | None = None) -> None:
        if not 0.0 <= challenge_fraction <= 1.0:
            raise ValueError(f"challenge_fraction must be in [0, 1], got {challenge_fraction}")
        rival_mix = dict(DEFAULT_RIVAL_MIX if rival_mix is None else rival_mix)
        unknown = sorted(set(rival_mix) - set(RIVALS))
        if unknown or any(w < 0 for w in rival_mix.values()) or sum(rival_mix.values()) <= 0:
            raise ValueError(
                f"rival_mix must map some of {RIVALS} to non-negative shares with a positive sum, got {rival_mix}"
            )
        self.challenge_fraction = challenge_fraction
        self.rival_mix = rival_mix

    def build(self, problems: list[Problem], seed: int) -> list[SFTExample]:
        return build_examples(problems, self.challenge_fraction, self.rival_mix, seed)

    def evaluate(self, problems: list[Problem], seed: int) -> list[SFTExample]:
        return eval_examples(problems, seed)
