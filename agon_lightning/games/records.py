"""What a training step played: each role's rollouts, verdicts and rewards (what the update and callbacks read)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from agon_lightning.game.rewards import RoleOutcome
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.rollout.base import RolloutBatch


@dataclass
class RoleRollout:
    """One role's rollouts in a step, with their verdicts and rewards.

    Attributes:
        adapter: The adapter that sampled them (and that trains on them).
        rollouts: The samples.
        verdicts: The verifier's (or the game's) verdict on each.
        rewards: ``[B]`` what each row is paid.
        advantages: ``[B]`` set before the update (the game's :meth:`~agon_lightning.games.base.Game.advantages`).
        old_logp: The sampling policy's log-probs (set when ``grpo.num_iterations`` > 1).
        role: The role's name, one of the game's ``GameSpec.roles`` (what ``model.kl`` addresses).
        versions: ``[B]`` the policy version each row was sampled with.
        group_size: Rows per group of the group advantages (``None``: ``grpo.num_generations``).
        reference: The role's KL term this step, ``(reference adapter or None for the base, β)``;
            set by the KL anchor before the update (``None``: no KL term).
    """

    adapter: str
    rollouts: RolloutBatch
    verdicts: list[Verdict]
    rewards: Tensor
    advantages: Tensor = field(default_factory=lambda: torch.zeros(0))
    old_logp: Tensor | None = None
    role: str = "drafter"
    versions: Tensor | None = None
    group_size: int | None = None
    reference: tuple[str | None, float] | None = None

    @property
    def correct(self) -> Tensor:
        return correct_of(self.verdicts)

    @property
    def outcome(self) -> RoleOutcome:
        """What the reward reads of these rollouts."""
        return outcome_of(self.rollouts, self.verdicts)


@dataclass
class StepRecord:
    """What a training step played: the update's input and the callbacks' source.

    ``draft`` is the first role (the drafter's, in Agon), ``challenge`` the second when there is
    one, ``others`` every further role (a judge, a second round): :attr:`roles` lists them all.
    """

    step: int
    problems: list[Problem]
    draft: RoleRollout
    summaries: list[str] = field(default_factory=list)
    challenge: RoleRollout | None = None
    others: list[RoleRollout] = field(default_factory=list)
    # Row i: the draft challenge i read and was graded against (see schedule.opponent_rows).
    opponents: Tensor | None = None
    # The game's own metrics this step (RoleRewards.metrics(), a game's terms), logged as they are.
    reward_terms: dict[str, float] = field(default_factory=dict)
    # A league step: the past drafter's drafts the challenge read instead of the drafter's (not trained).
    rival_drafts: RoleRollout | None = None
    league: dict[str, float] = field(default_factory=dict)  # the league's metrics (training.features.league)
    # What the step defined of the metrics a step may leave undefined, over every process, as the loggers got
    # them (training.step_metrics.sparse_metrics); filled in once the step is done.
    sparse_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def roles(self) -> list[RoleRollout]:
        """The step's roles: the first, the second when there is one, then the others."""
        return [self.draft] + ([self.challenge] if self.challenge is not None else []) + list(self.others)

    @property
    def opponent_correct(self) -> Tensor:
        """``[P * N]`` correctness of the draft each challenge was paired with."""
        c = (self.draft if self.rival_drafts is None else self.rival_drafts).correct
        return c if self.opponents is None else c[self.opponents]


def rows_of(version: int, rows: int) -> Tensor:
    """``[rows]`` the policy version of each row of a batch sampled with ``version``."""
    return torch.full((rows,), version, dtype=torch.long)


def correct_of(verdicts: list[Verdict]) -> Tensor:
    return torch.tensor([v.correct for v in verdicts], dtype=torch.float32)


def graded_of(verdicts: list[Verdict]) -> Tensor | None:
    """``[B]`` each verdict's graded reward (NaN where none applies); ``None`` when no verdict has one."""
    if not any(v.rewards for v in verdicts):
        return None
    return torch.tensor([math.nan if v.reward is None else v.reward for v in verdicts], dtype=torch.float32)


def outcome_of(rollouts: RolloutBatch, verdicts: list[Verdict]) -> RoleOutcome:
    """A role's outcome for the reward: correctness, lengths, texts and graded values."""
    return RoleOutcome(correct_of(verdicts), rollouts.lengths.cpu(), rollouts.texts, graded_of(verdicts))
