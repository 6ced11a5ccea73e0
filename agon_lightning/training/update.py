"""The update's math on a step's rollouts: log-probs, each role's loss, the non-finite guard.

Public functions of a :class:`Learner` (the module: its policy, settings and trainable
parameters), which benchmarks and tests call as the training step does.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor

from agon_lightning.adapters.policy import completion_hidden_states, output_weight, using
from agon_lightning.adapters.shared_prompt import sample_groups
from agon_lightning.games.records import RoleRollout
from agon_lightning.games.selection import take_rows
from agon_lightning.infra.logprobs import LogitHead, token_logprobs
from agon_lightning.rollout.base import Rollout, RolloutBatch
from agon_lightning.strategies import local_grads
from agon_lightning.training.grpo import (
    LossNormalizer,
    clipped_policy_loss,
    effective_sample_size,
    logprob_mismatch,
    sampler_correction,
    tis_clip_fraction,
)
from agon_lightning.training.options import GRPOOptions


class Learner(Protocol):
    """What the update math reads of the module."""

    policy: Any
    grpo: GRPOOptions
    rollout: Rollout
    trainable: list[torch.nn.Parameter]
    adapter_params: dict[str, list[torch.nn.Parameter]]
    logit_head: LogitHead


def policy_logprobs(
    learner: Learner, adapter: str | None, rollouts: RolloutBatch, rows: slice, group_size: int | None = None
) -> tuple[Tensor, Tensor]:
    """``(log-probs, entropies)`` ``[B, T]`` of the completions ``rows`` under ``adapter`` (``None``: the base).

    The rows of a group (``group_size`` rows; ``None``: ``grpo.num_generations``) share their
    prompt's leading tokens, which run once per group.
    """
    groups = sample_groups(rows, len(rollouts), group_size or learner.grpo.num_generations)
    return _logprobs(learner, adapter, rollouts.select(rows), groups)


def _logprobs(
    learner: Learner, adapter: str | None, rb: RolloutBatch, groups: Tensor
) -> tuple[Tensor, Tensor]:
    """``(log-probs, entropies)`` ``[B, T]`` of every row of ``rb``, whose consecutive groups have sizes ``groups``."""
    args = (learner.policy, rb.prompt_ids, rb.prompt_mask, rb.completion_ids, rb.completion_mask, groups)
    with using(learner.policy, adapter, learner.trainable):
        hidden = completion_hidden_states(*args)
    return token_logprobs(hidden, output_weight(learner.policy), rb.completion_ids, float(learner.rollout.temperature),
                          learner.grpo.logprob_chunk_size, learner.logit_head)  # fmt: skip


def idle_groups(advantages: Tensor, groups: Tensor) -> Tensor:
    """``[G]`` bool: the groups (consecutive sizes ``groups``) whose every advantage is exactly 0."""
    bounds = torch.cumsum(groups, 0).tolist()
    starts = [0, *bounds[:-1]]
    zero = (advantages == 0).cpu()
    return torch.tensor([bool(zero[a:b].all()) for a, b in zip(starts, bounds)], dtype=torch.bool)


def trained_logprobs(learner: Learner, role: RoleRollout, rows: slice, beta: float) -> tuple[Tensor, Tensor]:
    """:func:`policy_logprobs` of ``role``'s adapter on ``rows``, with a graph only where a gradient can come from.

    With β = 0 a row's share of the loss is its advantage times terms of its log-probs, so a group
    whose every advantage is 0 (rewards that all agree) adds exactly nothing to any gradient: its
    forward runs without autograd (its log-probs and statistics as before) and the backward
    skips it. One group keeps its graph when all are idle, so that every adapter takes part in
    every backward (DDP and DeepSpeed need it). Values and gradients are the full forward's up to
    float rounding (``tests/test_update_idle_groups.py``).
    """
    total = len(role.rollouts)
    groups = sample_groups(rows, total, role.group_size or learner.grpo.num_generations)
    rb = role.rollouts.select(rows)
    if beta > 0 or not torch.is_grad_enabled():
        return _logprobs(learner, role.adapter, rb, groups)
    idle = idle_groups(role.advantages[rows], groups)
    if bool(idle.all()):
        idle[0] = False  # one group keeps the adapter in the backward
    if not bool(idle.any()):
        return _logprobs(learner, role.adapter, rb, groups)
    owner = torch.repeat_interleave(torch.arange(len(groups)), groups)  # each row's group
    live = torch.nonzero(~idle[owner]).flatten()
    still = torch.nonzero(idle[owner]).flatten()
    logp, entropy = _logprobs(learner, role.adapter, take_rows(rb, live), groups[~idle])
    with torch.no_grad():
        idle_logp, idle_entropy = _logprobs(learner, role.adapter, take_rows(rb, still), groups[idle])
    order = torch.argsort(torch.cat([live, still])).to(logp.device)  # back to the rows' own order
    return (
        torch.cat([logp, idle_logp]).index_select(0, order),
        torch.cat([entropy, idle_entropy]).index_select(0, order),
    )


def loss_mask(rb: RolloutBatch, mask_truncated: bool) -> Tensor:
    """The completion tokens the loss counts (``mask_truncated``: none of a row that hit the cap)."""
    mask = rb.completion_mask
    if mask_truncated:
        mask = mask * (~rb.truncated).long().unsqueeze(1)
    return mask


def role_loss(
    learner: Learner,
    role: RoleRollout,
    rows: slice,
    norm: LossNormalizer,
    reference: tuple[str | None, float] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """One role's clipped surrogate (with KL and truncated importance weights as configured) on ``rows``, and its stats.

    ``reference``: the role's KL term, ``(adapter, β)`` (adapter ``None``: the base; see
    :mod:`agon_lightning.training.features.kl`); ``None``: ``grpo.kl_beta`` toward the base.
    """
    grpo = learner.grpo
    ref_adapter, beta = (None, grpo.kl_beta) if reference is None else reference
    rb = role.rollouts.select(rows)
    logp, entropy = trained_logprobs(learner, role, rows, beta)
    old = logp.detach() if role.old_logp is None else role.old_logp[rows]
    ref = None
    if beta > 0:
        with torch.no_grad():
            ref, _ = policy_logprobs(learner, ref_adapter, role.rollouts, rows, role.group_size)
    mask = loss_mask(rb, grpo.mask_truncated)
    weights = None
    if grpo.tis_cap is not None:
        if rb.logprobs is None:
            raise ValueError(
                f"grpo.tis_cap={grpo.tis_cap} needs the sampling log-probs, but "
                f"{type(learner.rollout).__name__} returned none; set grpo.tis_cap to null"
            )
        weights = sampler_correction(old, rb.logprobs.to(old.device), grpo.tis_cap)
    loss, stats = clipped_policy_loss(
        logp, old, role.advantages[rows].to(logp.device), mask, norm, grpo.epsilon_low,
        grpo.epsilon_high, grpo.loss_aggregation, ref, beta, weights,
    )  # fmt: skip
    if weights is not None:  # how much the truncated importance weights had to correct
        stats["tis_clip_fraction"] = tis_clip_fraction(old, rb.logprobs.to(old.device), grpo.tis_cap, mask)
        stats["ess"] = effective_sample_size(weights, mask)
    stats["entropy"] = (entropy * mask).sum() / mask.sum().clamp(min=1)
    if rb.logprobs is not None:  # how far the sampling policy is from the trainer's
        stats["logprob_mismatch"] = logprob_mismatch(old, rb.logprobs.to(old.device), rb.completion_mask)
    return loss, stats


def sampling_logprobs(learner: Learner, roles: list[RoleRollout], micro_batch: int) -> None:
    """Each role's log-probs before any update (``old_logp``), in micro-batches: what μ > 1 steps ratio against."""
    with torch.no_grad():
        for r in roles:
            total = len(r.rollouts)
            r.old_logp = torch.cat(
                [policy_logprobs(learner, r.adapter, r.rollouts, slice(i, i + micro_batch), r.group_size)[0]
                 for i in range(0, total, micro_batch)]
            )  # fmt: skip


def nonfinite_roles(learner: Learner, roles: list[RoleRollout], finite_loss: list[bool]) -> list[str]:
    """The roles (``"drafter (alpha, non-finite loss)"``) whose loss or adapter gradient is NaN or infinite."""
    bad: list[str] = []
    for i, role in enumerate(roles):  # i: the role's place in finite_loss
        # This process's part of each gradient (sharded strategies); any rank's verdict stops all.
        grads = local_grads(learner.adapter_params[role.adapter])
        # One device sync per adapter, not one per tensor.
        grads_ok = not grads or bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())
        if not (finite_loss[i] and grads_ok):
            what = "loss" if not finite_loss[i] else "gradient"
            bad.append(f"{role.role} ({role.adapter}, non-finite {what})")
    return bad
