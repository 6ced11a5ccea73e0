"""The update of one game step: μ optimizer steps over every role's rollouts, one joint backward each.

Every role trains its own adapter; each micro-batch is one backward through every role's loss
(a role with fewer rows joins the micro-batches it has rows in), so every trainable parameter
takes part in every backward (DDP needs no unused-parameter search, DeepSpeed gets the single
optimizer it accepts). A backward whose loss or gradient is not finite reaches no adapter.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from agon_lightning.games.records import RoleRollout
from agon_lightning.training.grpo import LossNormalizer
from agon_lightning.training.update import loss_mask, nonfinite_roles, role_loss, sampling_logprobs


def optimize(module: Any, roles: list[RoleRollout]) -> tuple[dict[str, float], bool]:
    """``(stats, updated)``: μ = ``grpo.num_iterations`` optimizer steps on the step's rollouts.

    When a backward is not finite on any process the step's update is dropped (:func:`skip_step`)
    and ``updated`` is ``False``.
    """
    grpo = module.grpo
    opt = module.optimizers()
    mb = grpo.micro_batch_size or max(len(r.rollouts) for r in roles)
    norms = [
        LossNormalizer(len(r.rollouts), int(loss_mask(r.rollouts, grpo.mask_truncated).sum()), module.rollout.max_new_tokens)
        for r in roles
    ]  # fmt: skip
    if grpo.num_iterations > 1:  # the sampling policy's log-probs, before any update
        sampling_logprobs(module, roles, mb)  # in micro-batches too: micro_batch_size bounds every forward
    longest = max(len(r.rollouts) for r in roles)
    stats_sum: dict[str, float] = {}
    for _ in range(grpo.num_iterations):
        opt.zero_grad(set_to_none=True)
        finite = [True] * len(roles)
        for start in range(0, longest, mb):
            loss = torch.zeros((), device=module.device)
            for i, (r, norm) in enumerate(zip(roles, norms)):
                total = len(r.rollouts)
                if start >= total:
                    continue
                loss_i, stats = role_loss(module, r, slice(start, start + mb), norm, r.reference)
                loss = loss + loss_i
                value = float(loss_i.detach())
                finite[i] = finite[i] and math.isfinite(value)
                share = min(mb, total - start) / total / len(roles) / grpo.num_iterations
                for k, v in stats.items():
                    stats_sum[k] = stats_sum.get(k, 0.0) + float(v) * share
                stats_sum["loss"] = stats_sum.get("loss", 0.0) + value / grpo.num_iterations
            # Always backward, even on a NaN: under DDP every rank must join each all-reduce.
            module.manual_backward(loss)
        bad = nonfinite_roles(module, roles, finite)
        if module.trainer.strategy.reduce_boolean_decision(bool(bad), all=False):
            opt.zero_grad(set_to_none=True)
            skip_step(module, bad or ["another process's"])
            return stats_sum, False
        if module.max_grad_norm is not None:
            module.clip_gradients(opt, gradient_clip_val=module.max_grad_norm, gradient_clip_algorithm="norm")
        opt.step()
        module.weights_updated(list(dict.fromkeys(r.adapter for r in roles)))
        scheduler = module.lr_schedulers()
        if scheduler is not None:
            scheduler.step()
    return stats_sum, True


def skip_step(module: Any, bad: list[str]) -> None:
    """Count a dropped update (the roles at fault in ``bad``); stop after ``max_consecutive_skips`` in a row.

    Raises:
        FloatingPointError: ``model.max_consecutive_skips`` skipped steps in a row.
    """
    module.skipped_steps += 1
    module.skips_in_a_row += 1
    message = (
        f"step {module.agon_step}: non-finite loss or gradient in the {', '.join(bad)}; the update was "
        f"skipped ({module.skips_in_a_row} in a row, {module.skipped_steps} in all)"
    )
    if module.skips_in_a_row >= module.max_consecutive_skips:
        raise FloatingPointError(
            f"{message}. Training stopped after {module.skips_in_a_row} skipped steps in a row "
            f"(model.max_consecutive_skips={module.max_consecutive_skips}). The adapters, and every "
            "checkpoint written, hold the last good step. Lower the learning rate, check the rewards the "
            "verifier and reward component return, or resume from the last checkpoint."
        )
    rank_zero_warn(message)
