"""A training step's logged metrics: accuracy, reward, lengths, each reward function's values, conversions.

They come in two kinds, logged two ways. :func:`step_metrics` holds what every step defines; the
module logs it with ``self.log``. :func:`sparse_metrics` holds what a step may leave undefined: a
rate over no wrong (or no right) draft, a reward function's mean over no value. Lightning repeats a
step metric's last value on every later step of its epoch until it is logged again, so such a metric
logged with ``self.log`` would put a value where none was measured — and a resumed run, with no
earlier value to repeat, would log something else than an unbroken one. These go to the loggers at
their step alone instead: a step that does not define one leaves its cell empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from agon_lightning.game.names import ALPHA
from agon_lightning.game.types import Verdict
from agon_lightning.training.records import StepRecord

# Per reward function: the completions it was asked about, those it returned None for, the sum and the
# sum of squares of its values.
COUNTS = 4


def _mean(values: Tensor) -> float:
    return float(values.float().mean()) if values.numel() else 0.0


def step_metrics(record: StepRecord) -> dict[str, float]:
    """The per-step game metrics every step defines (accuracy, reward, reward terms, lengths)."""
    d = record.draft
    metrics = {
        "train/drafter": float(d.adapter != ALPHA),
        "train/draft/reward": _mean(d.rewards),
        "train/draft/accuracy": _mean(d.correct),
        "train/draft/length": _mean(d.rollouts.lengths),
        "train/draft/truncation_rate": _mean(d.rollouts.truncated),
        **record.reward_terms,
        **record.league,
    }
    c = record.challenge
    if c is None:
        return metrics
    metrics.update({
        "train/challenge/reward": _mean(c.rewards),
        "train/challenge/accuracy": _mean(c.correct),
        "train/challenge/length": _mean(c.rollouts.lengths),
        "train/challenge/truncation_rate": _mean(c.rollouts.truncated),
    })  # fmt: skip
    return metrics


def sparse_metrics(record: StepRecord, total: Callable[[Tensor], Tensor] | None = None) -> dict[str, float]:
    """The step's metrics among those a step may leave undefined, from counts summed over every process.

    The conversion and regression rates (:func:`exchange_rates`) and each reward function's
    :func:`function_stats` (``reward/`` for the drafts, ``challenge_reward/`` for the challenges).

    Args:
        record: The step.
        total: Sums a tensor over every process (a collective: every process calls it once a step,
            with the same shape, since each has the same roles and reward functions); ``None``: one
            process.
    """
    names = function_names(record.draft.verdicts)
    roles = {"reward/": record.draft}
    if record.challenge is not None:
        roles["challenge_reward/"] = record.challenge
    elif not names:
        return {}
    counts = [exchange_counts(record).double()]
    counts += [function_counts(role.verdicts, names).flatten() for role in roles.values()]
    sums = torch.cat(counts)
    sums = (sums if total is None else total(sums)).cpu()
    metrics = exchange_rates(sums[:4])
    for prefix, role_sums in zip(roles, sums[4:].view(len(roles), len(names), COUNTS)):
        metrics.update(function_stats(prefix, names, role_sums))
    return metrics


# ---------------------------------------------------------------------------------------------
# Reward functions' values
# ---------------------------------------------------------------------------------------------
def function_names(verdicts: list[Verdict]) -> list[str]:
    """The reward functions whose values the verdicts hold, in order (none for a verifier without)."""
    return list(dict.fromkeys(name for v in verdicts for name in v.rewards))


def function_counts(verdicts: list[Verdict], names: list[str]) -> Tensor:
    """``[len(names), 4]`` float64, per function: the completions it was asked about, those it returned
    ``None`` for (does not apply), and the sum and the sum of squares of its values.

    A completion whose functions raised holds no values: it was asked about by none.
    """
    out = torch.zeros(len(names), COUNTS, dtype=torch.float64)
    for i, name in enumerate(names):
        asked = [v.rewards[name] for v in verdicts if name in v.rewards]
        values = [x for x in asked if x is not None]
        row = [len(asked), len(asked) - len(values), sum(values), sum(x * x for x in values)]
        out[i] = torch.tensor(row, dtype=torch.float64)
    return out


def function_stats(prefix: str, names: list[str], counts: Tensor) -> dict[str, float]:
    """``{prefix}<name>/none_share``, and ``/mean`` and ``/std`` where the function returned a value.

    ``none_share`` is the share of the completions it was asked about for which it returned ``None``;
    mean and std are over its values, as TRL logs them (TRL's ``nanstd``: with Bessel's correction),
    the std 0 for one value (where TRL's is NaN). ``counts``: :func:`function_counts`, maybe summed
    over processes.
    """
    out: dict[str, float] = {}
    for name, (asked, none, total, squares) in zip(names, counts.tolist()):
        if asked:
            out[f"{prefix}{name}/none_share"] = none / asked
        n = asked - none
        if n:
            mean = total / n
            out[f"{prefix}{name}/mean"] = mean
            # TRL's nanstd: Bessel-corrected (÷ n − 1); one value has no spread
            spread = max(squares - total * mean, 0.0)  # Σ (x − mean)², ≥ 0 against rounding
            out[f"{prefix}{name}/std"] = math.sqrt(spread / (n - 1)) if n > 1 else 0.0
    return out


def function_metrics(prefix: str, verdicts: list[Verdict]) -> dict[str, float]:
    """:func:`function_stats` of the verdicts of one process."""
    names = function_names(verdicts)
    return function_stats(prefix, names, function_counts(verdicts, names))


# ---------------------------------------------------------------------------------------------
# Conversions and regressions
# ---------------------------------------------------------------------------------------------
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
