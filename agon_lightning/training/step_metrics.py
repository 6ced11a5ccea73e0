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
from typing import Any

import torch
from torch import Tensor

from agon_lightning.game.types import Verdict
from agon_lightning.games.records import RoleRollout, StepRecord

# Per reward function: the completions it was asked about, those it returned None for, the sum and the
# sum of squares of its values.
COUNTS = 4


def _mean(values: Tensor) -> float:
    return float(values.float().mean()) if values.numel() else 0.0


# Agon's roles log under the names they always had (train/draft/…, challenge_reward/…); any other role under its own.
PREFIX = {"drafter": "draft", "challenger": "challenge"}


def role_prefix(role: str) -> str:
    """The metric prefix of a role: ``draft`` and ``challenge`` for Agon's, the role's name otherwise."""
    return PREFIX.get(role, role)


def reward_prefix(role: str, first: bool) -> str:
    """Where a role's reward-function values log: ``reward/`` for the first role, ``<prefix>_reward/`` otherwise."""
    return "reward/" if first else f"{role_prefix(role)}_reward/"


def by_role(record: StepRecord) -> dict[str, list[RoleRollout]]:
    """The step's rollouts grouped by role name, roles in the order they first played."""
    roles: dict[str, list[RoleRollout]] = {}
    for r in record.roles:
        roles.setdefault(r.role, []).append(r)
    return roles


def step_metrics(record: StepRecord, game_metrics: dict[str, float] | None = None) -> dict[str, float]:
    """The per-step metrics every step defines: each role's reward, accuracy, length and truncation rate,
    the game's own terms (``reward_terms``, ``game_metrics``) and the league's."""
    metrics: dict[str, float] = {}
    for role, parts in by_role(record).items():
        prefix = f"train/{role_prefix(role)}"
        metrics.update({
            f"{prefix}/reward": _mean(torch.cat([r.rewards.float().cpu() for r in parts])),
            f"{prefix}/accuracy": _mean(torch.cat([r.correct for r in parts])),
            f"{prefix}/length": _mean(torch.cat([r.rollouts.lengths.float().cpu() for r in parts])),
            f"{prefix}/truncation_rate": _mean(torch.cat([r.rollouts.truncated.float().cpu() for r in parts])),
        })  # fmt: skip
    return {**metrics, **(game_metrics or {}), **record.reward_terms, **record.league}


def sparse_metrics(
    record: StepRecord, total: Callable[[Tensor], Tensor] | None = None, game: Any = None
) -> dict[str, float]:
    """The step's metrics among those a step may leave undefined, from counts summed over every process.

    The game's counted metrics (Agon's conversion and regression rates: ``game.counts``) and each
    reward function's :func:`function_stats` per role (``reward/`` for the first role,
    ``challenge_reward/`` for Agon's challenger, ``<role>_reward/`` for any other).

    Args:
        record: The step.
        total: Sums a tensor over every process (a collective: every process calls it once a step,
            with the same shape, since each has the same roles and reward functions); ``None``: one
            process.
        game: The game (its ``counts`` and ``count_metrics``); ``None``: none counted.
    """
    roles = by_role(record)
    names = function_names([v for parts in roles.values() for r in parts for v in r.verdicts])
    game_counts = None if game is None else game.counts(record)
    if not names and game_counts is None:
        return {}
    counts = [] if game_counts is None else [game_counts.double().flatten()]
    width = sum(c.numel() for c in counts)
    counts += [
        function_counts([v for r in parts for v in r.verdicts], names).flatten() for parts in roles.values()
    ]
    sums = torch.cat(counts)
    sums = (sums if total is None else total(sums)).cpu()
    metrics = {} if game_counts is None else game.count_metrics(sums[:width])
    prefixes = [reward_prefix(role, i == 0) for i, role in enumerate(roles)]
    for prefix, role_sums in zip(prefixes, sums[width:].view(len(roles), len(names), COUNTS)):
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
