"""Who drafts and who challenges at each step, and which draft each challenge answers.

``rotate`` swaps roles every step, so both adapters learn both roles against a rival that
keeps improving; ``fixed`` is the paper's fixed-roles ablation (alpha always drafts);
``self_play`` has one adapter play both roles (our ``self_play`` variant, and the paper's
self-refinement with the cooperative reward). The pairing of challenges to drafts is
:func:`opponent_rows`.
"""

from __future__ import annotations

from typing import Literal

import torch

from agon_lightning.game.names import ADAPTERS, ALPHA, BETA

Schedule = Literal["rotate", "fixed", "self_play"]
SCHEDULES: tuple[str, ...] = ("rotate", "fixed", "self_play")


def roles_for_step(step: int, schedule: str = "rotate") -> tuple[str, str]:
    """``(drafter, challenger)`` adapter names for training step ``step`` (0-based)."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if schedule == "rotate":
        return (ALPHA, BETA) if step % 2 == 0 else (BETA, ALPHA)
    if schedule == "fixed":
        return ALPHA, BETA
    if schedule == "self_play":
        return ALPHA, ALPHA
    raise ValueError(f"unknown role schedule {schedule!r}; expected one of {SCHEDULES}")


def adapters_for(schedule: str, game: str) -> tuple[str, ...]:
    """The adapters a run needs: one for GRPO and self-play, two otherwise."""
    if game == "grpo" or schedule == "self_play":
        return (ALPHA,)
    return ADAPTERS


# ---------------------------------------------------------------------- who answers whom
Pairing = Literal["per_rollout", "shared"]
PAIRINGS: tuple[str, ...] = ("per_rollout", "shared")


def opponent_rows(num_problems: int, group_size: int, pairing: str = "per_rollout") -> torch.Tensor:
    """``[P * N]``: row ``i`` is the draft that challenge ``i`` reads and is graded against.

    ``per_rollout`` pairs challenge ``i`` with draft ``i`` (the paper's Agon: the opponents'
    difficulty varies inside the group, so the bonus gives a direction after group
    normalisation). ``shared`` pairs every challenge of a problem with that problem's first draft
    (the drafts of a problem are i.i.d., so the first is a uniform pick): one opponent per group,
    so ``1 − c(a)`` is constant in the group and the bonus only rescales correctness there — the
    paper's "competition with a shared opponent".
    """
    if num_problems < 0 or group_size < 1:
        raise ValueError(f"need num_problems >= 0 and group_size >= 1, got {num_problems} and {group_size}")
    rows = torch.arange(num_problems * group_size)
    if pairing == "per_rollout":
        return rows
    if pairing == "shared":
        return rows - rows % group_size
    raise ValueError(f"unknown pairing {pairing!r}; expected one of {PAIRINGS}")
