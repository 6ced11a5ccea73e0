"""The log-prob of each sampled token under the distribution it was drawn from, for every backend.

The update compares the policy that sampled a completion with the policy it trains
(``train/logprob_mismatch``) and can weight each token by their ratio (``grpo.tis_cap``).
Both need the sampler's own log-probs: a sampler in bf16, or one that merges the adapter into
a copy of the weights, is not the trainer, even when it is the same model. The decode loop
computes them in its sampling step (:func:`drawn_logprobs`); ``generate`` gets a processor that
records them from the same processed scores it samples from (:class:`LogprobRecorder`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def drawn_logprobs(scores: Tensor, tokens: Tensor) -> Tensor:
    """``[B]`` float32 ``log_softmax(scores)[b, tokens[b]]`` for processed scores ``[B, V]``."""
    return torch.log_softmax(scores.float(), dim=-1).gather(-1, tokens[:, None]).squeeze(1)


class LogprobRecorder:
    """A logits processor, last in ``generate``'s list, that keeps each sampled token's log-prob.

    At each step it sees the scores the token will be drawn from; the token itself is known at
    the next call (the last column of ``input_ids``) or, for the last step, from the returned
    completion (:meth:`logprobs`). Only one step's ``[B, V]`` log-softmax is held at a time.
    """

    def __init__(self) -> None:
        self._steps: list[Tensor] = []
        self._pending: Tensor | None = None  # [B, V] log-softmax of the step whose token is not seen yet

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self._pending is not None:
            self._steps.append(self._pending.gather(-1, input_ids[:, -1:]).squeeze(1))
        self._pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def logprobs(self, completion: Tensor) -> Tensor:
        """``[B, T]`` log-probs of ``completion`` ``[B, T]`` (the ids ``generate`` returned after the prompt)."""
        width = completion.shape[1]
        steps = self._steps[:width]
        if len(steps) < width and self._pending is not None:
            steps = steps + [self._pending.gather(-1, completion[:, len(steps) : len(steps) + 1]).squeeze(1)]
        if len(steps) != width:
            raise RuntimeError(f"recorded {len(steps)} sampling steps for a completion of {width} tokens")
        self._steps, self._pending = [], None
        return (
            torch.stack(steps, dim=1)
            if steps
            else completion.new_zeros(completion.shape, dtype=torch.float32)
        )


def is_sharded(weight: Any, shape: tuple[int, ...]) -> bool:
    """Whether ``weight`` is not one whole ``shape`` tensor on this rank.

    A DeepSpeed ZeRO-3 partition or an FSDP1 flat shard has another shape; an FSDP2 ``DTensor``
    reports the whole shape but holds only this rank's shard, so it counts as sharded too.
    """
    from torch.distributed.tensor import DTensor

    return isinstance(weight, DTensor) or tuple(weight.shape) != tuple(shape)
