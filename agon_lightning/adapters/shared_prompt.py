"""One forward of the prompt tokens that the rows of a group share.

A GRPO group is N completions of the same prompt, so the update's forward over
``prompt + completion`` runs the same prompt N times; the challenger's N prompts of one
problem differ only after the problem (each reads a different draft), so they repeat the
problem N times. Here each group's shared leading tokens run once (with autograd: the adapter
shapes their keys and values too), the key/value cache is repeated for the rows that share
it, and each row's own rest of the prompt and its completion run on top of that cache. The
repeat is an ``index_select`` whose backward sums the N rows' gradients into the one prefix
forward, so values and gradients are those of the full forward (to float rounding) at
``(N-1)/N`` less work on the shared tokens.

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


def sample_groups(rows: slice, total: int, size: int) -> Tensor:
    """Sizes ``[G]`` of the GRPO groups (``size`` consecutive rows of a ``total``-row batch) that ``rows`` cuts."""
    index = torch.arange(rows.start or 0, min(rows.stop if rows.stop is not None else total, total))
    return torch.unique_consecutive(index // size, return_counts=True)[1]


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
    # transformers' name since the rename; the old one (a FutureWarning in transformers 5) only before it
    checkpointing = getattr(decoder, "is_activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = getattr(decoder, "is_gradient_checkpointing", False)
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


def _left_padded(tokens: Tensor, start: Tensor, length: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """``(ids, mask) [B, width]``: row ``i`` holds ``tokens[i, start_i : start_i + length_i]``, left-padded."""
    cols = torch.arange(width, device=tokens.device)  # [width]
    pad = (width - length).unsqueeze(1)  # [B, 1]
    mask = cols >= pad  # [B, width]
    src = (start.unsqueeze(1) + cols - pad).clamp(0, max(tokens.shape[1] - 1, 0))
    return tokens.gather(1, src).masked_fill(~mask, 0), mask.long()


def shared_prefixes(prompt_ids: Tensor, prompt_mask: Tensor, counts: Tensor) -> tuple[Tensor, Tensor] | None:
    """``(aligned [B, P], shared [B])``: each row's prompt left-aligned, and how many leading tokens its group shares.

    A group's shared prefix is the longest run of leading tokens common to all its rows, less
    one where that is a whole prompt (the last prompt token runs per row: its state predicts
    the first completion token). ``None`` when a prompt is not left-padded, or when sharing
    would save nothing.

    Args:
        prompt_ids, prompt_mask: ``[B, P]`` left-padded prompts.
        counts: ``[G]`` consecutive rows per group (e.g. a GRPO group: N samples of one problem).
    """
    device, width = prompt_ids.device, prompt_ids.shape[1]
    lengths = prompt_mask.sum(dim=1)  # [B]
    cols = torch.arange(width, device=device)
    if not torch.equal(prompt_mask.bool(), cols >= (width - lengths).unsqueeze(1)):
        return None
    valid = cols < lengths.unsqueeze(1)  # [B, P]
    src = (width - lengths.unsqueeze(1) + cols).clamp(max=width - 1)
    aligned = prompt_ids.gather(1, src).masked_fill(~valid, 0)  # [B, P]: real tokens first
    rows = torch.repeat_interleave(torch.arange(len(counts), device=device), counts.to(device))  # [B]
    first = (torch.cumsum(counts, 0) - counts).to(device)[rows]  # [B]: the first row of each row's group
    same = (aligned == aligned[first]) & valid & valid[first]  # [B, P]
    common = same.long().cumprod(dim=1).sum(dim=1)  # [B] leading tokens shared with the group's first row
    shared = torch.full((len(counts),), width, dtype=torch.long, device=device)
    shared = shared.scatter_reduce(0, rows, torch.minimum(common, (lengths - 1).clamp(min=0)), reduce="amin")[
        rows
    ]  # [B]
    saved = shared.masked_fill(first == torch.arange(len(rows), device=device), 0).sum()
    return (aligned, shared) if int(saved) > 0 else None


def prefix_hidden_states(
    decoder: Any,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    aligned: Tensor,
    shared: Tensor,
    counts: Tensor,
) -> Tensor:
    """Final hidden states ``[B, T, H]`` predicting each completion token, each group's prefix run once.

    The rows are laid out as ``[shared prefix | rest of the prompt | completion]``, each block
    left-padded on its own: padding in the middle of a row is masked like padding at its start,
    and the position ids (from the mask) are those of the plain left-padded row.

    Args:
        decoder: The base model's decoder (adapters active as the caller set them).
        prompt_ids, prompt_mask: ``[B, P]`` left-padded prompts.
        completion_ids, completion_mask: ``[B, T]`` completions.
        aligned, shared: From :func:`shared_prefixes`.
        counts: ``[G]`` consecutive rows per group, as given to :func:`shared_prefixes`.
    """
    lengths = prompt_mask.sum(dim=1)
    zeros = torch.zeros_like(shared)
    prefix, prefix_mask = _left_padded(aligned, zeros, shared, int(shared.max()))  # [B, C]
    rest, rest_mask = _left_padded(aligned, shared, lengths - shared, int((lengths - shared).max()))  # [B, R]
    prefix_positions = (prefix_mask.cumsum(dim=1) - 1).clamp(min=0)
    _, cache = prompt_cache(decoder, prefix, prefix_mask, prefix_positions, counts)
    attn = torch.cat([prefix_mask, rest_mask, completion_mask], dim=1)  # [B, C + R + T]
    positions = (attn.cumsum(dim=1) - 1).clamp(min=0)
    c, r = prefix.shape[1], rest.shape[1]
    hidden = decoder(
        input_ids=torch.cat([rest, completion_ids], dim=1)[:, :-1], attention_mask=attn[:, :-1],
        position_ids=positions[:, c:-1], use_cache=True, **{cache_argument(decoder): cache},
    ).last_hidden_state  # [B, R + T - 1, H]  # fmt: skip
    return hidden[:, r - 1 :]
