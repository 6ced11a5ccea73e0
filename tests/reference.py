"""The plain reference for what one training step must do to each adapter.

Everything the trainer does to be fast or small is left out: one role at a time with that
adapter alone active (PEFT's own ``set_adapter``), PEFT's own LoRA forward (not the fused
one of ``agon_lightning.adapters.fast_lora``), every row's prompt run for itself (no shared prompt
forward), no activation checkpointing, no micro-batching, the model's full logits and
``log_softmax``, the frozen reference through a
separate no-grad pass, and gradients taken with ``torch.autograd.grad`` with respect to the
adapter's parameters *by name*. The optimizer is plain SGD with momentum, simulated here, so
the expected weights after a step are exact and the comparison needs no learning-rate slack.

Several shards (one per DDP rank) average their gradients, as DDP does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from agon_lightning.adapters import fast_lora
from agon_lightning.rollout.hf import RolloutBatch
from agon_lightning.training.grpo import LossNormalizer, clipped_policy_loss
from agon_lightning.training.module import GRPOOptions


@dataclass
class SGDMomentum:
    """The optimizer of the comparison: ``buf = m·buf + g; θ -= lr·buf`` (``buf = g`` at first)."""

    lr: float = 1.0
    momentum: float = 0.5

    def factory(self, params: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum)


def lora_names(policy: Any, adapter: str) -> list[str]:
    return [n for n, _ in policy.named_parameters() if "lora_" in n and f".{adapter}." in n]


def lora_weights(policy: Any) -> dict[str, Tensor]:
    return {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" in n}


def load_weights(policy: Any, weights: dict[str, Tensor]) -> None:
    params = dict(policy.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)


def full_logprobs(model: Any, rb: RolloutBatch, temperature: float) -> Tensor:
    """``[B, T]`` log-probs of the completion tokens from the model's own logits."""
    ids = torch.cat([rb.prompt_ids, rb.completion_ids], dim=1)
    attn = torch.cat([rb.prompt_mask, rb.completion_mask], dim=1)
    positions = (attn.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits.float()
    p = rb.prompt_ids.shape[1]
    logp = torch.log_softmax(logits[:, p - 1 : -1] / temperature, dim=-1)
    return logp.gather(-1, rb.completion_ids.unsqueeze(-1)).squeeze(-1)


def _roles(record: Any) -> list[Any]:
    return [record.draft] + ([record.challenge] if record.challenge is not None else [])


def reference_step(
    policy: Any,
    shards: list[Any],
    opts: GRPOOptions,
    temperature: float,
    max_new_tokens: int,
    adapters: tuple[str, ...],
    sgd: SGDMomentum,
    buffers: dict[str, Tensor],
    max_grad_norm: float | None = None,
) -> dict[str, Tensor]:
    """Apply one game step of ``shards`` (``StepRecord``s, one per rank) to ``policy``'s adapters.

    Returns the adapters' weights afterwards; ``buffers`` (momentum) is updated in place.
    ``max_grad_norm`` clips the global norm of both adapters' gradients together, as
    ``torch.nn.utils.clip_grad_norm_`` does (``g · min(1, max / (‖g‖ + 1e-6))``).
    """
    fast_lora.uninstall(policy)  # PEFT's own LoRA layers
    policy.train()
    refs: dict[tuple[int, int], Tensor] = {}
    olds: dict[tuple[int, int], Tensor] = {}
    for s, record in enumerate(shards):
        for r, role in enumerate(_roles(record)):
            with torch.no_grad():
                if opts.kl_beta > 0:
                    with policy.disable_adapter():
                        refs[s, r] = full_logprobs(policy, role.rollouts, temperature)
                policy.set_adapter(role.adapter)
                olds[s, r] = full_logprobs(policy, role.rollouts, temperature)
    for _ in range(opts.num_iterations):
        grads = {
            n: torch.zeros_like(p)
            for a in adapters
            for n, p in policy.named_parameters()
            if n in lora_names(policy, a)
        }
        for s, record in enumerate(shards):
            for r, role in enumerate(_roles(record)):
                rb = role.rollouts
                policy.set_adapter(role.adapter)
                names = lora_names(policy, role.adapter)
                params = dict(policy.named_parameters())
                logp = full_logprobs(policy, rb, temperature)
                mask = rb.completion_mask
                if opts.mask_truncated:
                    mask = mask * (~rb.truncated).long().unsqueeze(1)
                norm = LossNormalizer(len(rb), int(mask.sum()), max_new_tokens)
                loss, _ = clipped_policy_loss(
                    logp, olds[s, r], role.advantages, mask, norm, opts.epsilon_low, opts.epsilon_high,
                    opts.loss_aggregation, refs.get((s, r)), opts.kl_beta,
                )  # fmt: skip
                got = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
                for n, g in zip(names, got):
                    if g is not None:
                        grads[n] += g / len(shards)
        if max_grad_norm is not None:
            total = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g) for g in grads.values()])
            )
            scale = torch.clamp(max_grad_norm / (total + 1e-6), max=1.0)
            grads = {n: g * scale for n, g in grads.items()}
        params = dict(policy.named_parameters())
        with torch.no_grad():
            for n, g in grads.items():
                buffers[n] = g.clone() if n not in buffers else buffers[n].mul_(sgd.momentum).add_(g)
                params[n].sub_(sgd.lr * buffers[n])
    return lora_weights(policy)
