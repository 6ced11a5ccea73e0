"""Group-normalised advantages (GRPO's): a pure function of the rewards, the games' default."""

from __future__ import annotations

import torch
from torch import Tensor

STD_KINDS = ("population", "unbiased")


def group_advantages(
    rewards: Tensor, group_size: int, scale_std: bool = True, eps: float = 1e-4, std: str = "population"
) -> tuple[Tensor, Tensor]:
    """Group-normalised advantages.

    Args:
        rewards: ``[G * N]`` rewards, consecutive runs of ``group_size`` forming a group.
        group_size: N.
        scale_std: Divide by the group's std (GRPO); ``False`` only centres (Dr. GRPO).
        eps: Added to the std.
        std: ``population`` (divide by N) or ``unbiased`` (by N − 1, as TRL does; advantages
            √((N−1)/N) as large: 0.935× at N = 8).

    Returns:
        ``(advantages [G * N], zero_std [G])`` — ``zero_std`` marks groups whose rewards
        are all equal (they carry no learning signal).
    """
    if std not in STD_KINDS:
        raise ValueError(f"std must be one of {STD_KINDS}, got {std!r}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = rewards.float().view(-1, group_size)  # [G, N]
    mean = grouped.mean(dim=1, keepdim=True)
    unbiased = std == "unbiased"
    spread = grouped.std(dim=1, keepdim=True, unbiased=unbiased) if group_size > 1 else torch.zeros_like(mean)
    adv = grouped - mean
    zero_std = spread < 1e-8
    if scale_std:
        # A group with equal rewards has zero advantage (never 0/0 when eps = 0).
        adv = torch.where(zero_std, torch.zeros_like(adv), adv / (spread + eps))
    return adv.reshape(-1), zero_std.squeeze(1)
