"""GRPO's math as pure functions: advantages, importance weights, the clipped loss.

Kept free of models and trainers so each piece is unit-tested on hand-computed numbers. The
sampled-token log-probs they start from are :mod:`agon_lightning.infra.logprobs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

# The sampled-token log-probs live below both the adapters and training; importable from here too.
from agon_lightning.infra.logprobs import LogitHead, token_logprobs  # noqa: F401

Aggregation = Literal["token_mean", "seq_mean", "dr_grpo"]
AGGREGATIONS: tuple[str, ...] = ("token_mean", "seq_mean", "dr_grpo")


# Group advantages are the game's default (agon_lightning.game.advantages); importable from here too.
from agon_lightning.game.advantages import STD_KINDS, group_advantages  # noqa: E402,F401


def sampler_correction(trainer_logp: Tensor, engine_logp: Tensor, cap: float) -> Tensor:
    """Truncated importance-sampling weights ``min(exp(trainer − engine), cap)``, ``[B, T]``, no gradient.

    An inference engine (vLLM) samples with its own kernels and precision, so the policy it
    sampled from is not exactly the trainer's: the surrogate's "old" policy. Re-weighting each
    token by the ratio of the trainer's probability to the engine's makes the update unbiased
    for the trainer's policy again; capping the ratio bounds its variance (Yao et al., 2025,
    "Your efficient RL framework secretly brings you off-policy RL training").

    Args:
        trainer_logp: ``[B, T]`` the trainer's log-probs of the sampled tokens before the update.
        engine_logp: ``[B, T]`` the engine's log-probs of the same tokens, as it sampled them.
        cap: Largest weight (> 0).
    """
    if cap <= 0:
        raise ValueError(f"the sampler-correction cap must be > 0, got {cap}")
    with torch.no_grad():
        return torch.exp(trainer_logp.float() - engine_logp.float()).clamp(max=cap)


def tis_clip_fraction(trainer_logp: Tensor, engine_logp: Tensor, cap: float, mask: Tensor) -> Tensor:
    """Fraction of the ``mask``-ed tokens whose weight ``exp(trainer − engine)`` exceeds ``cap`` (clipped by
    :func:`sampler_correction`); a scalar, no gradient, 0 without tokens."""
    with torch.no_grad():
        m = mask.float()
        clipped = (trainer_logp.float() - engine_logp.float()) > torch.log(torch.tensor(float(cap)))
        return (clipped.float() * m).sum() / m.sum().clamp(min=1)


def effective_sample_size(weights: Tensor, mask: Tensor) -> Tensor:
    """Kish's effective sample size of the ``mask``-ed importance ``weights``, normalised to [0, 1].

    ``(Σw)² / (n · Σw²)`` over the n tokens of ``mask``: 1 when every weight is equal (the samples
    count fully), 1/n when one token carries all the weight, 0 when every weight is 0. A scalar,
    no gradient; 1 without tokens (nothing to correct).
    """
    with torch.no_grad():
        m = mask.double()
        w = weights.double() * m
        n, total, squares = m.sum(), w.sum(), (w * w).sum()
        if n == 0:
            return torch.ones(())
        if squares == 0:
            return torch.zeros(())
        # <= 1 by Cauchy–Schwarz; the clamp keeps rounding (weights all ~1) from crossing it
        return (total * total / (n * squares)).clamp(max=1.0).float()


def logprob_mismatch(trainer_logp: Tensor, engine_logp: Tensor, mask: Tensor) -> Tensor:
    """Mean ``|trainer − engine|`` log-prob over the ``mask``-ed completion tokens (a scalar, no gradient)."""
    with torch.no_grad():
        m = mask.float()
        return ((trainer_logp.float() - engine_logp.float()).abs() * m).sum() / m.sum().clamp(min=1)


@dataclass
class LossNormalizer:
    """Global counts that make a micro-batched loss equal to the full-batch loss."""

    num_seqs: int
    num_tokens: int
    max_tokens: int


def aggregate(per_token: Tensor, mask: Tensor, aggregation: str, norm: LossNormalizer) -> Tensor:
    """Reduce a ``[B, T]`` per-token loss to a scalar.

    ``token_mean`` averages over all completion tokens of the batch; ``seq_mean`` averages
    each sequence then the batch; ``dr_grpo`` sums and divides by ``num_seqs × max_tokens``
    (a constant, so long completions are not down-weighted).
    """
    mask = mask.float()
    if aggregation == "token_mean":
        return (per_token * mask).sum() / max(norm.num_tokens, 1)
    if aggregation == "seq_mean":
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.sum() / max(norm.num_seqs, 1)
    if aggregation == "dr_grpo":
        return (per_token * mask).sum() / max(norm.num_seqs * norm.max_tokens, 1)
    raise ValueError(f"unknown loss aggregation {aggregation!r}; expected one of {AGGREGATIONS}")


def clipped_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    norm: LossNormalizer,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    aggregation: str = "token_mean",
    ref_logp: Tensor | None = None,
    beta: float = 0.0,
    sampler_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO's clipped surrogate (plus β·KL to the reference when given).

    Args:
        logp, old_logp: ``[B, T]`` log-probs under the current and the sampling policy.
        advantages: ``[B]`` one advantage per sequence.
        mask: ``[B, T]`` 1 on completion tokens that count.
        ref_logp: ``[B, T]`` log-probs under the frozen base (only when ``beta > 0``).
        sampler_weights: ``[B, T]`` per-token weights of the surrogate (not of the KL term):
            :func:`sampler_correction` when an inference engine sampled the completions.

    Returns:
        ``(loss, stats)`` with ``clip_fraction`` and, when β > 0, ``kl`` (masked token means).
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1)  # [B, 1]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    if sampler_weights is not None:
        per_token = per_token * sampler_weights.detach()
    m = mask.float()
    denom = m.sum().clamp(min=1)
    with torch.no_grad():
        was_clipped = ((ratio < 1 - eps_low) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))
        stats = {"clip_fraction": (was_clipped.float() * m).sum() / denom}
    if beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp")
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1  # k3 estimator, >= 0
        per_token = per_token + beta * kl
        stats["kl"] = ((kl.detach() * m).sum() / denom).detach()
    return aggregate(per_token, mask, aggregation, norm), stats
