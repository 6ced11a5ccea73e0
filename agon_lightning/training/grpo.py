"""GRPO's math as pure functions: advantages, sampled-token log-probs, the clipped loss.

Kept free of models and trainers so each piece is unit-tested on hand-computed numbers.
Log-probs are computed from final hidden states in chunks of tokens by a small autograd
function that recomputes each chunk's logits in the backward: the ``[tokens, V]`` logits of
one chunk exist at a time, in reused buffers, so a 150k vocabulary costs one chunk of
memory, not B·T·V.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

Aggregation = Literal["token_mean", "seq_mean", "dr_grpo"]
AGGREGATIONS: tuple[str, ...] = ("token_mean", "seq_mean", "dr_grpo")


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


@dataclass(frozen=True)
class LogitHead:
    """What a model family does to ``hidden @ W.T`` before the softmax: ``softcap(scale · z)``.

    Attributes:
        scale: Multiplies the raw logits (Cohere's ``logit_scale``; ``1 / logits_scaling`` for
            Granite).
        softcap: ``c · tanh(z / c)`` (Gemma 2 and 3's ``final_logit_softcapping``); ``None`` = off.
    """

    scale: float = 1.0
    softcap: float | None = None

    def __post_init__(self) -> None:
        if self.softcap is not None and self.softcap <= 0:
            raise ValueError(f"LogitHead.softcap must be > 0 or None, got {self.softcap}")

    def apply(self, logits: Tensor) -> Tensor:
        """The model's logits from the raw projection (out of place)."""
        if self.scale != 1.0:
            logits = logits * self.scale
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


def _project(hidden: Tensor, weight: Tensor, out: Tensor) -> Tensor:
    """``out ← float32(hidden @ weight.T)``, written into a reused ``[c, V]`` buffer."""
    if hidden.dtype == torch.float32 and weight.dtype == torch.float32:
        torch.matmul(hidden, weight.t(), out=out)
    else:  # low precision: the product in the model's dtype, as the sampling pass computed it
        out.copy_(hidden @ weight.t())
    return out


def _logits(hidden: Tensor, weight: Tensor, head: LogitHead, temperature: float, out: Tensor) -> Tensor:
    """``out ← softcap(scale · hidden @ weight.T) / T`` in place; the sampling policy's logits."""
    _project(hidden, weight, out)
    if head.scale != 1.0:
        out.mul_(head.scale)
    if head.softcap is not None:
        out.div_(head.softcap).tanh_().mul_(head.softcap)
    if temperature != 1.0:
        out.div_(temperature)
    return out


class _ChunkedLogProbs(torch.autograd.Function):
    """Log-probs and entropies of the targets, one chunk of tokens at a time, with a hand backward.

    The forward keeps only ``logZ`` per token; the backward recomputes each chunk's logits
    into one reused buffer and turns it in place into ``g·(onehot − softmax) / T`` (times the
    soft-cap's derivative ``1 − tanh²`` and the scale when the model has them). Peak memory
    is two ``[chunk, V]`` float buffers in the forward and one in the backward (two with a
    soft-cap), and no chunk is projected twice in the forward or normalised twice in the backward.
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, chunk: int,
                head: LogitHead):  # fmt: skip
        n, vocab = targets.numel(), weight.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)
        entropy, logz = torch.empty_like(logp), torch.empty_like(logp)
        logits_buf = hidden.new_empty(min(chunk, n), vocab, dtype=torch.float32)
        probs_buf = torch.empty_like(logits_buf)
        for start in range(0, n, chunk):
            rows = slice(start, min(start + chunk, n))
            c = rows.stop - start
            logits = _logits(hidden[rows], weight, head, temperature, logits_buf[:c])  # [c, V]
            peak = logits.amax(dim=-1, keepdim=True)
            logits.sub_(peak)
            probs = torch.exp(logits, out=probs_buf[:c])
            total = probs.sum(dim=-1, keepdim=True)
            log_total = total.log()
            logz[rows] = (peak + log_total).squeeze(-1)
            logits.sub_(log_total)  # log-softmax, in place
            probs.div_(total)  # softmax, in place
            logp[rows] = logits.gather(-1, targets[rows].unsqueeze(-1)).squeeze(-1)
            # Row-wise -Σ p·log p as a batched dot product: no third [c, V] buffer.
            entropy[rows] = -torch.bmm(probs.unsqueeze(1), logits.unsqueeze(2)).view(c)
        ctx.save_for_backward(hidden, weight, targets, logz)
        ctx.temperature, ctx.chunk, ctx.head = temperature, chunk, head
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, grad_entropy: Tensor):
        hidden, weight, targets, logz = ctx.saved_tensors
        head, temperature = ctx.head, ctx.temperature
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if need_weight else None
        n, chunk = targets.numel(), ctx.chunk
        buf = hidden.new_empty(min(chunk, n), weight.shape[0], dtype=torch.float32)
        tanh_buf = torch.empty_like(buf) if head.softcap is not None else None
        for start in range(0, n, chunk):
            rows = slice(start, min(start + chunk, n))
            c = rows.stop - start
            if tanh_buf is None:
                grad = _logits(hidden[rows], weight, head, temperature, buf[:c])  # [c, V] logits / T
            else:  # keep tanh(scale·z / cap) for the soft-cap's derivative
                t = _project(hidden[rows], weight, tanh_buf[:c]).mul_(head.scale / head.softcap).tanh_()
                grad = torch.mul(t, head.softcap / temperature, out=buf[:c])
            grad.sub_(logz[rows].unsqueeze(-1)).exp_()  # softmax
            g = grad_logp[rows].float().unsqueeze(-1)  # [c, 1]
            grad.mul_(-g).scatter_add_(-1, targets[rows].unsqueeze(-1), g)  # g·(onehot − softmax)
            if tanh_buf is not None:
                grad.mul_(1 - t.square_())  # d softcap / d(scale·z)
            factor = head.scale / temperature
            if factor != 1.0:
                grad.mul_(factor)
            grad_logits = grad.to(weight.dtype)
            if need_hidden:
                grad_hidden[rows] = grad_logits @ weight
            if need_weight:
                grad_weight.add_(grad_logits.t().float() @ hidden[rows].float())
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def token_logprobs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    head: LogitHead = LogitHead(),
) -> tuple[Tensor, Tensor]:
    """Log-probs (and entropies) of ``targets`` under ``softmax(head(hidden @ weight.T) / T)``.

    Args:
        hidden: ``[..., H]`` final hidden states (the positions that predict ``targets``).
        weight: ``[V, H]`` output-embedding matrix.
        targets: ``[...]`` token ids.
        temperature: The sampling temperature, so log-probs match the sampling policy.
        chunk_size: Tokens per chunk; peak logits memory is two ``chunk_size × V`` floats.
        head: The model family's scaling and soft-capping of its logits.

    Returns:
        ``(logp, entropy)`` shaped like ``targets``; entropy carries no gradient.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    shape = targets.shape
    flat_h, flat_t = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)  # [B*T, H], [B*T]
    if flat_t.numel() == 0:
        empty = flat_h.new_zeros(0, dtype=torch.float32)
        return empty.view(shape), empty.view(shape)
    logp, entropy = _ChunkedLogProbs.apply(flat_h, weight, flat_t, float(temperature), chunk_size, head)
    return logp.view(shape), entropy.view(shape)


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
