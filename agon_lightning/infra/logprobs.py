"""Sampled-token log-probs from final hidden states: what the adapters, training and callbacks all read.

Log-probs are computed in chunks of tokens by a small autograd function that recomputes each
chunk's logits in the backward: the ``[tokens, V]`` logits of one chunk exist at a time, in
reused buffers, so a 150k vocabulary costs one chunk of memory, not B·T·V. A leaf of the
package: it imports nothing of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


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
