"""One forward of a prompt for all the completions sampled from it.

A GRPO group is N completions of the same prompt, so the update's forward over
``prompt + completion`` runs the same prompt N times. Here each distinct prompt runs once
(with autograd: the adapter shapes its keys and values too), its key/value cache is
repeated for the rows that share it, and the completions run on top of that cache. The
repeat is an ``index_select`` whose backward sums the N rows' gradients into the one
prompt forward, so values and gradients are those of the full forward (to float rounding)
at ``(N-1)/N`` less prompt work. Rows whose prompts differ (the challenger's, which each
read a different draft) simply form groups of one.

Sampling N completions per prompt has the same waste in its prefill: ``HFRollout`` builds the
cache of each distinct prompt (all but its last token) once with :func:`prompt_cache` and
hands ``generate`` the repeated cache, so the N samples start from one prefill.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor


def prompt_groups(prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor | None:
    """Sizes ``[G]`` of the runs of consecutive rows with identical prompts; ``None`` if no two share one."""
    if prompt_ids.shape[0] < 2:
        return None
    same = (prompt_ids[1:] == prompt_ids[:-1]).all(dim=1) & (prompt_mask[1:] == prompt_mask[:-1]).all(dim=1)
    if not bool(same.any()):
        return None
    starts = torch.cat(
        [torch.zeros(1, dtype=torch.long, device=same.device), torch.nonzero(~same).flatten() + 1]
    )
    ends = torch.cat([starts[1:], torch.tensor([prompt_ids.shape[0]], device=same.device)])
    return ends - starts


def plain_cache(decoder: Any) -> bool:
    """Whether ``decoder`` keeps a plain growing KV cache (no sliding window or recurrent state)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        cache = DynamicCache(config=decoder.config)
    except Exception:  # a config the cache does not understand: the caller runs every row in full
        return False
    return all(type(layer) is DynamicLayer for layer in cache.layers)


def shares_prompts(decoder: Any) -> bool:
    """Whether the update may run a prompt once for its group: a plain cache, no checkpointing.

    Activation checkpointing recomputes each layer in the backward, where the cache would be
    updated a second time; sliding-window and other cache kinds are left to the full forward.
    """
    checkpointing = (
        decoder.is_activation_checkpointing  # transformers' name since the rename
        if hasattr(type(decoder), "is_activation_checkpointing")
        else getattr(decoder, "is_gradient_checkpointing", False)
    )
    return not checkpointing and plain_cache(decoder)


def cache_argument(decoder: Any) -> str:
    """The name a model's forward and ``generate`` take the KV cache under (renamed in transformers 5.x)."""
    return "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"


def prompt_cache(
    decoder: Any, ids: Tensor, attn: Tensor, positions: Tensor, counts: Tensor
) -> tuple[Tensor, Any]:
    """Run each distinct prompt once: ``(hidden [G, P, H], KV cache repeated to the B rows)``.

    Args:
        ids, attn, positions: ``[B, P]`` prompt ids, mask and position ids of every row.
        counts: ``[G]`` rows per distinct prompt (consecutive), from :func:`prompt_groups`.
    """
    from transformers import DynamicCache

    rows = torch.repeat_interleave(torch.arange(len(counts), device=ids.device), counts.to(ids.device))  # [B]
    first = torch.cumsum(counts, 0) - counts  # the first row of each group
    cache = DynamicCache(config=decoder.config)
    hidden = decoder(
        input_ids=ids[first], attention_mask=attn[first], position_ids=positions[first], use_cache=True,
        **{cache_argument(decoder): cache},
    ).last_hidden_state  # [G, P, H]  # fmt: skip
    for layer in cache.layers:  # [G, heads, P, d] -> [B, heads, P, d]; the backward sums each group
        layer.keys, layer.values = layer.keys.index_select(0, rows), layer.values.index_select(0, rows)
    return hidden, cache


def grouped_hidden_states(
    decoder: Any, ids: Tensor, attn: Tensor, positions: Tensor, prompt_len: int, counts: Tensor
) -> Tensor:
    """Final hidden states ``[B, T, H]`` at the positions predicting each completion token.

    Args:
        decoder: The base model's decoder (adapters active as the caller set them).
        ids, attn, positions: ``[B, P + T]`` prompt + completion ids, mask and position ids.
        prompt_len: P.
        counts: ``[G]`` rows per distinct prompt (consecutive), from :func:`prompt_groups`.
    """
    p = prompt_len
    prefix, cache = prompt_cache(decoder, ids[:, :p], attn[:, :p], positions[:, :p], counts)
    rows = torch.repeat_interleave(torch.arange(len(counts), device=ids.device), counts.to(ids.device))  # [B]
    last = prefix[:, -1:].index_select(0, rows)  # [B, 1, H]: predicts the first completion token
    if ids.shape[1] - p == 1:
        return last
    rest = decoder(
        input_ids=ids[:, p:-1], attention_mask=attn[:, :-1], position_ids=positions[:, p:-1], use_cache=True,
        **{cache_argument(decoder): cache},
    ).last_hidden_state  # [B, T - 1, H]  # fmt: skip
    return torch.cat([last, rest], dim=1)
