"""The SFT data: worked solutions as examples in both roles' prompts, and their data module.

Each problem becomes one example: the drafter's (the plain problem prompt) or, by a seeded draw,
the challenger's (the problem plus a rival's summary), where the rival's draft is right, has a
slipped step, wrote up only part of its work, or was cut off inside its trace — every summary a
challenger can meet in RL. The target is always the correct worked solution
(:mod:`agon_lightning.traces`). Held-out problems are evaluated once in each role.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from agon_lightning.data.base import ProblemDataset
from agon_lightning.data.holdout import HashHoldout
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule, generate_problems, training_problems
from agon_lightning.traces import (
    corrupted_completion,
    evaluate,
    format_completion,
    problem_expression,
    target_completion,
)
from agon_lightning.training.validation import SPLIT
from agon_lightning.types import Problem

RIVALS = ("right", "slipped", "partial", "empty")
DEFAULT_RIVAL_MIX = {"right": 0.3, "slipped": 0.4, "partial": 0.15, "empty": 0.15}


@dataclass
class SFTExample:
    """One supervised example.

    Attributes:
        problem: The problem.
        target: The completion to learn (the correct worked solution).
        rival_draft: For a challenger example, the rival's full draft (its summary goes in the
            prompt); ``None`` for a drafter example.
        rival: What the rival's draft is (one of :data:`RIVALS`), for a challenger example.
    """

    problem: Problem
    target: str
    rival_draft: str | None = None
    rival: str = ""

    @property
    def kind(self) -> str:
        """``draft`` or ``challenge_<rival>`` (the metric group)."""
        return "draft" if self.rival_draft is None else f"challenge_{self.rival}"


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


class SFTExamples(ABC):
    """Builds a task's SFT examples: its own worked solutions and rivals, in the metric groups of
    :data:`RIVALS` (``SFTExample.rival``), so the SFT module logs them like the arithmetic ones."""

    @abstractmethod
    def build(self, problems: list[Problem], seed: int) -> list[SFTExample]:
        """The training examples for ``problems`` (seeded: same problems and seed, same examples)."""

    @abstractmethod
    def evaluate(self, problems: list[Problem], seed: int) -> list[SFTExample]:
        """The held-out examples: each problem as a drafter, and as a challenger."""


def _collate(batch: list[SFTExample]) -> list[SFTExample]:
    return list(batch)


class SFTDataModule(ReasoningGymDataModule):
    """reasoning-gym problems as SFT examples, with held-out problems for greedy evaluation.

    Use the same ``tasks``, ``val_size`` and ``val_seed`` as the RL run, so the accuracy
    measured here is the RL run's starting validation accuracy; the SFT ``data_seed`` is
    chosen apart from RL's, and held-out questions are dropped from training.

    Args:
        challenge_fraction: Share of training examples in the challenger's prompt format
            (``None``: 0.5); for the built-in arithmetic examples only.
        rival_mix: Rival kind (``right``, ``slipped``, ``partial``, ``empty``) → share of the
            challenger examples; for the built-in arithmetic examples only.
        examples: Another task's example builder (e.g.
            :class:`~agon_lightning.testbeds.countdown.sft.CountdownExamples`), which carries its
            own proportions; ``None``: the arithmetic worked solutions of
            :mod:`agon_lightning.traces`.
        train_tasks: Tasks the training problems come from (``None``: ``tasks``), e.g. more
            sizes than the held-out set; every held-out question (main and hard) is dropped.
        holdout: The held-out part of the space: no training problem is ever drawn from it (main
            and hard alike, whatever ``val_size`` and ``hard_size`` evaluate). Use the RL run's.
        (other args): As :class:`~agon_lightning.data.reasoning_gym.ReasoningGymDataModule`;
            the hard set is only held out from training here, never evaluated.
    """

    def __init__(
        self,
        tasks: dict[str, dict[str, Any]] | None = None,
        train_size: int = 100_000,
        val_size: int | None = 200,
        data_seed: int = 20_001,
        val_seed: int = 10_001,
        batch_size: int = 64,
        val_batch_size: int = 200,
        challenge_fraction: float | None = None,
        rival_mix: dict[str, float] | None = None,
        seed: int = 0,
        num_workers: int = 0,
        examples: SFTExamples | None = None,
        train_tasks: dict[str, dict[str, Any]] | None = None,
        hard_tasks: dict[str, dict[str, Any]] | None = None,
        hard_size: int = 200,
        hard_seed: int = 30_001,
        question_format: str | None = None,
        holdout: HashHoldout | None = None,
    ) -> None:
        super().__init__(
            tasks=tasks, train_size=train_size, val_size=val_size, data_seed=data_seed, val_seed=val_seed,
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers,
            hard_tasks=hard_tasks, hard_size=hard_size, hard_seed=hard_seed, question_format=question_format,
            holdout=holdout,
        )  # fmt: skip
        if examples is not None and (challenge_fraction is not None or rival_mix is not None):
            raise ValueError(
                f"challenge_fraction ({challenge_fraction}) and rival_mix ({rival_mix}) shape the "
                f"arithmetic examples; {type(examples).__name__} carries its own proportions"
            )
        challenge_fraction = 0.5 if challenge_fraction is None else challenge_fraction
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
        self.examples = examples
        self.train_tasks = train_tasks

    def load_train(self) -> list[Problem]:
        if self.train_tasks is None:
            return super().load_train()
        if (
            self.holdout is not None
        ):  # the held-out part of the whole space, whichever size each set evaluates
            return training_problems(
                self.train_tasks, self.train_size, self.data_seed, self.question_format, self.holdout
            )
        held_out = {p.question for p in self.load_val()}
        problems = generate_problems(self.train_tasks, self.train_size, self.data_seed, self.question_format)
        return [p for p in problems if p.question not in held_out]

    def train_dataloader(self) -> DataLoader:
        if self.examples is not None:
            examples = self.examples.build(self.train_problems, self.seed)
        else:
            examples = build_examples(self.train_problems, self.challenge_fraction, self.rival_mix, self.seed)
        return DataLoader(
            ProblemDataset(examples),  # type: ignore[arg-type]  # a list dataset of any item
            batch_size=self.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(self.seed),
            collate_fn=_collate,
            num_workers=self.num_workers,
            drop_last=True,
        )

    def val_dataloader(self) -> DataLoader:
        main = [p for p in self.val_problems if p.metadata.get(SPLIT) != "hard"]
        held_out = (self.examples.evaluate if self.examples is not None else eval_examples)(main, self.seed)
        return DataLoader(
            ProblemDataset(held_out),  # type: ignore[arg-type]
            batch_size=self.val_batch_size,
            collate_fn=_collate,
            num_workers=self.num_workers,
        )
