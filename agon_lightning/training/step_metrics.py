"""A training step's logged metrics: accuracy, reward, lengths, each reward function's values, conversions."""

from __future__ import annotations

import torch
from torch import Tensor

from agon_lightning.game.names import ALPHA
from agon_lightning.game.types import Verdict
from agon_lightning.training.records import StepRecord


def function_metrics(prefix: str, verdicts: list[Verdict]) -> dict[str, float]:
    """``{prefix}<name>/mean`` and ``/std`` of each reward function's values, as TRL logs them.

    Values that are ``None`` (the function does not apply) are left out; a function that applied
    to no row has no entry. The std is TRL's (``nanstd``: with Bessel's correction), 0 for one value
    (where TRL's is NaN).
    """
    out: dict[str, float] = {}
    names = dict.fromkeys(name for v in verdicts for name in v.rewards)
    for name in names:
        values = torch.tensor(
            [x for v in verdicts if (x := v.rewards.get(name)) is not None], dtype=torch.float64
        )
        if values.numel():
            out[f"{prefix}{name}/mean"] = float(values.mean())
            # TRL's nanstd: Bessel-corrected (÷ n − 1); one value has no spread
            out[f"{prefix}{name}/std"] = float(values.std()) if values.numel() > 1 else 0.0
    return out


def _mean(values: Tensor) -> float:
    return float(values.float().mean()) if values.numel() else 0.0


def step_metrics(record: StepRecord) -> dict[str, float]:
    """The per-step game metrics (accuracy, reward, conversion and regression, lengths)."""
    d = record.draft
    metrics = {
        "train/drafter": float(d.adapter != ALPHA),
        "train/draft/reward": _mean(d.rewards),
        "train/draft/accuracy": _mean(d.correct),
        "train/draft/length": _mean(d.rollouts.lengths),
        "train/draft/truncation_rate": _mean(d.rollouts.truncated),
        **record.reward_terms,
        **record.league,
        **function_metrics("reward/", d.verdicts),
    }
    c = record.challenge
    if c is None:
        return metrics
    metrics.update(function_metrics("challenge_reward/", c.verdicts))
    metrics.update({
        "train/challenge/reward": _mean(c.rewards),
        "train/challenge/accuracy": _mean(c.correct),
        "train/challenge/length": _mean(c.rollouts.lengths),
        "train/challenge/truncation_rate": _mean(c.rollouts.truncated),
    })  # fmt: skip
    return metrics


def exchange_counts(record: StepRecord) -> Tensor:
    """``[converted, wrong drafts, regressed, right drafts]`` of a step (zeros without a challenger)."""
    if record.challenge is None:
        return torch.zeros(4)
    a, b = record.opponent_correct, record.challenge.correct
    wrong, right = a == 0, a == 1
    return torch.stack([(b[wrong] == 1).sum(), wrong.sum(), (b[right] == 0).sum(), right.sum()]).float()


def exchange_rates(counts: Tensor) -> dict[str, float]:
    """P(challenger right | draft wrong) and P(challenger wrong | draft right), each only where defined.

    A step with no wrong draft has no conversion rate (not a rate of 0): the key is left out.
    """
    converted, wrong, regressed, right = (float(x) for x in counts)
    rates = {}
    if wrong > 0:
        rates["train/conversion_rate"] = converted / wrong
    if right > 0:
        rates["train/regression_rate"] = regressed / right
    return rates
