"""Rewards: turn the verifier's 0/1 verdicts into each role's scalar reward.

The drafter is graded on its own correctness c(a_i) only, exactly as in GRPO. The
challenger is paid for its correctness, for *converting* a failed draft into a success
(c(b_i)·(1−c(a_i))), and optionally for being shorter when both are right. The conversion
bonus is what makes the game competitive: a challenger that only copies earns nothing extra.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class RoleRewards:
    """Per-rollout rewards for both roles, each shaped ``[P * N]``.

    ``challenge`` is ``None`` in single-policy games (GRPO).
    """

    draft: Tensor
    challenge: Tensor | None = None


class Reward(ABC):
    """Maps verdicts (and lengths) of paired drafts a_i and challenges b_i to rewards."""

    @abstractmethod
    def __call__(
        self,
        draft_correct: Tensor,
        challenge_correct: Tensor | None = None,
        draft_lengths: Tensor | None = None,
        challenge_lengths: Tensor | None = None,
    ) -> RoleRewards:
        """All tensors are ``[P * N]``; correctness as 0/1 floats or bools."""


def competitive_challenge_reward(
    draft_correct: Tensor,
    challenge_correct: Tensor,
    draft_lengths: Tensor,
    challenge_lengths: Tensor,
    conversion_bonus: float = 1.0,
    length_tiebreak: float = 0.0,
) -> Tensor:
    """c(b) + λ·c(b)·(1−c(a)) + τ·[c(a) ∧ c(b) ∧ len(b) < len(a)]."""
    a, b = draft_correct.float(), challenge_correct.float()
    shorter = (challenge_lengths < draft_lengths).float()
    return b + conversion_bonus * b * (1 - a) + length_tiebreak * a * b * shorter


class CompetitiveReward(Reward):
    """Agon's reward.

    Args:
        conversion_bonus: λ, paid when the challenger solves what its drafter failed.
        length_tiebreak: τ, paid when both are right and the challenger is shorter.
    """

    def __init__(self, conversion_bonus: float = 1.0, length_tiebreak: float = 0.0) -> None:
        if conversion_bonus < 0:
            raise ValueError(f"conversion_bonus must be >= 0, got {conversion_bonus}")
        if length_tiebreak < 0:
            raise ValueError(f"length_tiebreak must be >= 0, got {length_tiebreak}")
        self.conversion_bonus = conversion_bonus
        self.length_tiebreak = length_tiebreak

    def __call__(self, draft_correct, challenge_correct=None, draft_lengths=None, challenge_lengths=None):
        draft = draft_correct.float()
        if challenge_correct is None:
            return RoleRewards(draft=draft)
        if draft_lengths is None or challenge_lengths is None:
            draft_lengths = challenge_lengths = torch.zeros_like(draft)
        challenge = competitive_challenge_reward(
            draft_correct, challenge_correct, draft_lengths, challenge_lengths,
            self.conversion_bonus, self.length_tiebreak,
        )  # fmt: skip
        return RoleRewards(draft=draft, challenge=challenge)


class CorrectnessReward(Reward):
    """Plain correctness for every role: vanilla GRPO, or the cooperative ablation."""

    def __call__(self, draft_correct, challenge_correct=None, draft_lengths=None, challenge_lengths=None):
        return RoleRewards(
            draft=draft_correct.float(),
            challenge=None if challenge_correct is None else challenge_correct.float(),
        )
