"""Rewards: turn each role's verdicts (and lengths, and texts) into its scalar reward.

The paper's reward, every weight an option (c ∈ {0, 1} is final-answer correctness, φ ∈ [0, 1]
a :class:`~agon_lightning.game.formats.FormatCheck`, ``a_i`` the draft that challenge ``b_i`` was
paired with):

- drafter: ``w_c·c(a) + w_f·φ(a)`` — plain GRPO on correctness and format;
- challenger: ``w_c·c(b) + λ·K(a, b) + τ·[c(a) ∧ c(b) ∧ len(b) < len(a)] + w_f·φ(b)``, where the
  competitive term K is the conversion bonus ``c(b)·(1 − c(a))`` (``form: bonus``, the paper's
  Agon) or the margin ``c(b) − c(a)`` (``form: margin``, its ablation);
- cooperative: λ = 0 (:class:`CorrectnessReward`, also the reward of GRPO).

The paper's weights are w_c 2, λ 1, w_f 0.5, τ 0. What reaches the update is the group-normalised
advantage, so only differences *within* a group of N rollouts of one problem matter: a term that
is constant in the group (c(a) under the margin form with one shared opponent, say) vanishes,
and with std scaling so does a common factor of all weights; λ/w_c is what the bonus weighs
against correctness and w_f/w_c what format weighs.

The margin form swaps one term and keeps the rest: its challenger reward exceeds the bonus form's
by ``−λ·c(a)·(1 − c(b))``, i.e. it also charges λ for losing a draft that was right.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from jsonargparse import lazy_instance
from torch import Tensor

from agon_lightning.game.formats import FormatCheck, ThinkAnswerFormat

FORMS = ("bonus", "margin")


@dataclass(frozen=True)
class RoleOutcome:
    """One role's ``B = P·N`` rollouts as a reward reads them.

    Attributes:
        correct: ``[B]`` 0/1 verdicts.
        lengths: ``[B]`` completion tokens.
        texts: The ``B`` completions (what a format check reads).
        graded: ``[B]`` the verifier's graded reward (``Verdict.reward``: the reward functions'
            weighted sum; NaN where none applies), or ``None`` for a verifier without one.
    """

    correct: Tensor
    lengths: Tensor
    texts: Sequence[str]
    graded: Tensor | None = None

    def __post_init__(self) -> None:
        if not (len(self.correct) == len(self.lengths) == len(self.texts)):
            raise ValueError(
                f"a role's outcome needs one verdict, length and text per rollout, got "
                f"{len(self.correct)}, {len(self.lengths)} and {len(self.texts)}"
            )

    def select(self, rows: Tensor) -> RoleOutcome:
        """The outcome of rows ``rows`` (an index tensor; rows may repeat)."""
        graded = None if self.graded is None else self.graded[rows]
        return RoleOutcome(self.correct[rows], self.lengths[rows], [self.texts[int(i)] for i in rows], graded)

    def paid(self) -> Tensor:
        """``[B]`` R: the graded reward where there is one (0 where no function applies), else c."""
        if self.graded is None:
            return self.correct.float()
        return torch.nan_to_num(self.graded.float(), nan=0.0)


@dataclass(frozen=True)
class Outcomes:
    """What happened in one step, for the reward.

    Attributes:
        draft: The drafter's rollouts.
        challenge: The challenger's (``None`` in single-policy games: GRPO).
        opponent: Row ``i`` is the draft challenge ``i`` answered (see
            :func:`~agon_lightning.games.schedule.opponent_rows`); ``None``: draft ``i`` itself.
    """

    draft: RoleOutcome
    challenge: RoleOutcome | None = None
    opponent: RoleOutcome | None = None

    @property
    def paired_draft(self) -> RoleOutcome:
        return self.draft if self.opponent is None else self.opponent


@dataclass
class RoleRewards:
    """Per-rollout rewards for both roles, each ``[P * N]``, and the terms they are made of.

    ``challenge`` is ``None`` in single-policy games (GRPO). ``terms`` maps ``draft/format``,
    ``challenge/competitive``, … to the unweighted per-rollout term, for logging.
    """

    draft: Tensor
    challenge: Tensor | None = None
    terms: dict[str, Tensor] = field(default_factory=dict)

    def metrics(self, prefix: str = "train/") -> dict[str, float]:
        """The mean of each term, as ``{prefix}{term}`` (``train/challenge/competitive``, …)."""
        return {f"{prefix}{name}": float(t.float().mean()) for name, t in self.terms.items() if t.numel()}


class Reward(ABC):
    """Maps one step's :class:`Outcomes` to both roles' rewards.

    ``pays_graded`` says whether the component pays a verifier's graded reward
    (``RoleOutcome.graded``); one that pays only c is refused beside a graded verifier.
    """

    pays_graded: bool = False

    @abstractmethod
    def __call__(self, outcomes: Outcomes) -> RoleRewards:
        """Rewards for every draft and (when there are challenges) every challenge."""


# ---------------------------------------------------------------------- the math
def competitive_term(challenge_correct: Tensor, draft_correct: Tensor, form: str = "bonus") -> Tensor:
    """K(a, b): the conversion bonus ``c(b)·(1 − c(a))`` or the margin ``c(b) − c(a)``."""
    a, b = draft_correct.float(), challenge_correct.float()
    if form == "bonus":
        return b * (1 - a)
    if form == "margin":
        return b - a
    raise ValueError(f"form must be one of {FORMS}, got {form!r}")


def tiebreak_term(
    challenge_correct: Tensor, draft_correct: Tensor, challenge_lengths: Tensor, draft_lengths: Tensor
) -> Tensor:
    """``[c(a) ∧ c(b) ∧ len(b) < len(a)]``: both right and the challenger strictly shorter."""
    shorter = (challenge_lengths < draft_lengths).float()
    return draft_correct.float() * challenge_correct.float() * shorter


def challenger_reward(
    challenge: RoleOutcome, draft: RoleOutcome, challenge_format: Tensor, correctness_weight: float = 2.0,
    conversion_bonus: float = 1.0, length_tiebreak: float = 0.0, format_weight: float = 0.5, form: str = "bonus",
) -> dict[str, Tensor]:  # fmt: skip
    """The challenger's reward and its unweighted terms: ``{"reward", "competitive", "tiebreak"}``."""
    k = competitive_term(challenge.correct, draft.correct, form)
    tie = tiebreak_term(challenge.correct, draft.correct, challenge.lengths, draft.lengths)
    reward = (
        correctness_weight * challenge.correct.float()
        + conversion_bonus * k
        + length_tiebreak * tie
        + format_weight * challenge_format
    )
    return {"reward": reward, "competitive": k, "tiebreak": tie}


def cut_value(outcome: RoleOutcome) -> float | None:
    """A graded value of ``outcome`` other than 0 and 1 (what a reward paying only c leaves out), or ``None``."""
    if outcome.graded is None:
        return None
    values = outcome.graded[~torch.isnan(outcome.graded)]
    cut = values[(values != 0) & (values != 1)]
    return float(cut[0]) if cut.numel() else None


def format_scores(check: FormatCheck | None, texts: Sequence[str]) -> Tensor:
    """φ of each text (zeros without a check)."""
    if check is None:
        return torch.zeros(len(texts))
    return torch.tensor([check.score(t) for t in texts], dtype=torch.float32)


# ---------------------------------------------------------------------- the components
class CompetitiveReward(Reward):
    """Agon's reward (its defaults are the paper's).

    Args:
        correctness_weight: w_c, paid to either role for a right answer.
        conversion_bonus: λ, weight of the competitive term: the bonus when the challenger
            solves what its drafter failed (``form: bonus``), or the margin ``c(b) − c(a)``
            (``form: margin``).
        length_tiebreak: τ, paid when both are right and the challenger is shorter.
        format_weight: w_f, paid to either role times φ.
        format: The format check φ (``None``: no format term; then ``format_weight`` must be 0).
        form: ``bonus`` (the paper's Agon) or ``margin`` (its reward-form ablation).
    """

    def __init__(
        self,
        correctness_weight: float = 2.0,
        conversion_bonus: float = 1.0,
        length_tiebreak: float = 0.0,
        format_weight: float = 0.5,
        format: FormatCheck | None = lazy_instance(ThinkAnswerFormat),
        form: Literal["bonus", "margin"] = "bonus",
    ) -> None:
        for name, value in [("correctness_weight", correctness_weight), ("conversion_bonus", conversion_bonus),
                            ("length_tiebreak", length_tiebreak), ("format_weight", format_weight)]:  # fmt: skip
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        if format is None and format_weight > 0:
            raise ValueError(
                f"format_weight={format_weight} pays a format check, but format is null; "
                "give format (e.g. agon_lightning.game.formats.ThinkAnswerFormat) or set format_weight: 0"
            )
        self.correctness_weight = correctness_weight
        self.conversion_bonus = conversion_bonus
        self.length_tiebreak = length_tiebreak
        self.format_weight = format_weight
        self.format = format
        self.form = form

    def __call__(self, outcomes: Outcomes) -> RoleRewards:
        d = outcomes.draft
        d_format = format_scores(self.format, d.texts)
        rewards = RoleRewards(
            draft=self.correctness_weight * d.correct.float() + self.format_weight * d_format,
            terms={"draft/format": d_format},
        )
        c = outcomes.challenge
        if c is None:
            return rewards
        c_format = format_scores(self.format, c.texts)
        challenge = challenger_reward(
            c, outcomes.paired_draft, c_format, self.correctness_weight, self.conversion_bonus,
            self.length_tiebreak, self.format_weight, self.form,
        )  # fmt: skip
        rewards.challenge = challenge.pop("reward")
        rewards.terms["challenge/format"] = c_format
        rewards.terms.update({f"challenge/{name}": term for name, term in challenge.items()})
        return rewards


class CorrectnessReward(CompetitiveReward):
    """Correctness and format only, for every role: vanilla GRPO, and the cooperative game (λ = τ = 0).

    Args:
        correctness_weight: w_c.
        format_weight: w_f.
        format: The format check φ (``None``: no format term; then ``format_weight`` must be 0).
    """

    def __init__(
        self,
        correctness_weight: float = 2.0,
        format_weight: float = 0.5,
        format: FormatCheck | None = lazy_instance(ThinkAnswerFormat),
    ) -> None:
        super().__init__(correctness_weight, 0.0, 0.0, format_weight, format)


class GradedReward(Reward):
    """The reward functions' weighted sum as GRPO's reward, and Agon's bonus on top for the challenger.

    With a :class:`~agon_lightning.verifiers.reward_function.RewardFunctionVerifier`, R is TRL's
    reward: the weighted sum of the functions that apply (0 where none applies, as TRL's nansum
    of nothing); with any other verifier, R = c. Correctness c (the verifier's ``correct_if``
    rule) drives only the competitive terms:

    - drafter: ``R(a)``;
    - challenger: ``R(b) + λ·K(a, b) + τ·[c(a) ∧ c(b) ∧ len(b) < len(a)]``, K the conversion bonus
      ``c(b)·(1 − c(a))`` or the margin ``c(b) − c(a)``.

    Args:
        conversion_bonus: λ, 1 as in :class:`CompetitiveReward` (a switch from it keeps its value). The
            paper's reward is an accuracy function at weight 2, a format function at 0.5 and λ = 1;
            with accuracy at weight 1, λ = 0.5 keeps the paper's ratio λ/w_c = 1/2.
        length_tiebreak: τ, paid when both are right and the challenger is shorter.
        form: ``bonus`` (the paper's Agon) or ``margin`` (its reward-form ablation).
    """

    pays_graded = True

    def __init__(
        self,
        conversion_bonus: float = 1.0,
        length_tiebreak: float = 0.0,
        form: Literal["bonus", "margin"] = "bonus",
    ) -> None:
        for name, value in [("conversion_bonus", conversion_bonus), ("length_tiebreak", length_tiebreak)]:
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        self.conversion_bonus = conversion_bonus
        self.length_tiebreak = length_tiebreak
        self.form = form

    def __call__(self, outcomes: Outcomes) -> RoleRewards:
        rewards = RoleRewards(draft=outcomes.draft.paid())
        c = outcomes.challenge
        if c is None:
            return rewards
        a = outcomes.paired_draft
        k = competitive_term(c.correct, a.correct, self.form)
        tie = tiebreak_term(c.correct, a.correct, c.lengths, a.lengths)
        rewards.challenge = c.paid() + self.conversion_bonus * k + self.length_tiebreak * tie
        rewards.terms.update({"challenge/competitive": k, "challenge/tiebreak": tie})
        return rewards
