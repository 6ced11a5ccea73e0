"""The decode loop with every shape fixed: a static key/value cache, for a compiled (and graphed) step.

:func:`agon_lightning.rollout.decode_loop.decode` keeps a batch small as it goes: the cache grows
by doubling and finished rows leave the batch. Every such step has new shapes, which is what a
CPU wants (less work) and what an accelerator's launch overhead cannot afford: on a GPU a small
model's decode step is a few hundred kernel launches of microseconds each, and replaying them as
one captured graph (CUDA graphs, which ``torch.compile(mode="reduce-overhead")`` records) needs a
step whose shapes and addresses never change. Here:

- the cache is allocated once, ``prompt + max_new_tokens`` wide, and never grows;
- every row stays in the batch to the end (a finished row's tokens are padding, as in
  :func:`~agon_lightning.rollout.decode_loop.decode`), and whether all have finished is read
  back from the device every ``check_every`` tokens only;
- the new token's keys and values are written at a position held in a tensor, and attention
  runs over the whole cache under a mask, so the step is the same call at every position;
- ``compile_mode`` compiles that step once per shape (``"reduce-overhead"``: CUDA graphs on a
  GPU; ``"default"``: fused kernels, also on a CPU), writing into cache buffers kept from call to
  call with their addresses marked static (:func:`kept_cache`). So that a run meets few shapes, a compiled
  call rounds its rows up to a power of two (at least :data:`MIN_ROWS`; the extra rows repeat the
  last prompt and are dropped) and its cache up to a multiple of :data:`CAPACITY_STEP` positions.

The arithmetic is the decode loop's own (:func:`~agon_lightning.rollout.decode_loop._forward`,
the same weights, sampling and log-probs): greedy tokens equal the decode loop's, and a sampled
token's log-prob is that of the distribution it was drawn from (``tests/test_static_decode.py``);
what differs is the random stream of sampling (every row draws at every step) and the masked
positions attention sums over (zeros, so values agree to float rounding).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn import functional as F

from agon_lightning.rollout.decode_loop import (
    Sampling,
    Weights,
    _Cache,
    _forward,
    _next_tokens,
    check_prompt_fits,
    prefill,
    rotary_tables,
)

COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune-no-cudagraphs")
MIN_ROWS = 8  # a compiled call's fewest rows
CAPACITY_STEP = 64  # a compiled call's cache width is a multiple of this
KEPT_CACHES = 4  # compiled calls' cache buffers kept for reuse (the most recent shapes)
_compiled: dict[str, Callable[..., Tensor]] = {}  # one compiled step per mode, per process
_caches: dict[tuple, _Cache] = {}  # a compiled call's cache buffers, by shape, reused by the next call


def kept_cache(w: Weights, rows: int, capacity: int, like: Tensor) -> _Cache:
    """Cache buffers of this shape that outlive the call, their addresses marked static.

    A compiled step writes its cache in place; CUDA graphs replay only with the same addresses,
    and ``torch.compile`` records a step that mutates an input only when that input's address
    is marked static (as ``transformers``' own static cache marks it). So the buffers are
    allocated once per shape and reused by every later call of that shape (the most recent
    :data:`KEPT_CACHES` shapes are kept); what a call leaves in them is never read by the next,
    which writes each prompt over them and masks every position it has not written.
    """
    key = (like.device, like.dtype, rows, capacity, w.kv_heads, w.head_dim, len(w.layers))
    cache = _caches.pop(key, None)
    if cache is None:
        cache = _Cache(w, rows, capacity, like)
        for t in (*cache.keys, *cache.values):
            torch._dynamo.mark_static_address(t)
    _caches[key] = cache  # the most recent last
    while len(_caches) > KEPT_CACHES:
        _caches.pop(next(iter(_caches)))
    return cache


def _step(
    w: Weights, token: Tensor, cache: _Cache, slot: Tensor, cos: Tensor, sin: Tensor, mask: Tensor
) -> Tensor:
    """The hidden state ``[B, H]`` after one new token a row, written at ``slot`` of a fixed-size cache."""
    return _forward(w, F.embedding(token[:, None], w.embed), cache, 0, cos, sin, mask, slot=slot)[:, 0]


def step_function(compile_mode: str | None) -> Callable[..., Tensor]:
    """The decode step, compiled with ``compile_mode`` (``None``: as it is)."""
    if compile_mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode must be one of {COMPILE_MODES}, got {compile_mode!r}")
    if compile_mode is None:
        return _step
    if compile_mode not in _compiled:
        _compiled[compile_mode] = torch.compile(_step, mode=compile_mode, dynamic=False)
    return _compiled[compile_mode]


@torch.no_grad()
def decode_static(
    w: Weights,
    ids: Tensor,
    attn: Tensor,
    max_new_tokens: int,
    eos_ids: list[int],
    pad_id: int,
    sampling: Sampling,
    counts: Tensor | None = None,
    compile_mode: str | None = None,
    check_every: int = 8,
) -> tuple[Tensor, Tensor]:
    """Completion ids ``[B, steps]`` and their log-probs, as :func:`~agon_lightning.rollout.decode_loop.decode`
    returns them, from a step whose shapes never change.

    Args:
        counts: ``[G]`` consecutive rows per distinct prompt (each is prefilled once); ``None``: every row.
        compile_mode: see :func:`step_function`.
        check_every: tokens between reads of whether every row has finished (each read waits for the device).
    """
    if check_every < 1:
        raise ValueError(f"check_every must be >= 1, got {check_every}")
    check_prompt_fits(attn, w.context)
    rows = ids.shape[0]
    capacity = ids.shape[1] + max_new_tokens
    if compile_mode is not None:  # few shapes a run: each new one compiles (and records a graph) again
        padded = max(MIN_ROWS, 1 << (rows - 1).bit_length())
        if padded > rows:
            ids = torch.cat([ids, ids[-1:].expand(padded - rows, -1)])
            attn = torch.cat([attn, attn[-1:].expand(padded - rows, -1)])
            if counts is not None:
                counts = torch.cat([counts[:-1], counts[-1:] + (padded - rows)])
        capacity = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
    device = ids.device
    total, width = ids.shape  # ``total - rows`` rows only fill a compiled shape: done from the start
    eos = torch.tensor(eos_ids, device=device)
    table_cos, table_sin = rotary_tables(w, capacity, device)
    cache, x = prefill(w, ids, attn, counts, capacity, table_cos, table_sin)
    if compile_mode is not None:  # the compiled step writes into buffers at fixed addresses
        kept = kept_cache(w, total, capacity, w.embed)
        for mine, theirs in ((kept.keys, cache.keys), (kept.values, cache.values)):
            for dst, src in zip(mine, theirs, strict=True):
                dst.copy_(src)
        cache = kept
    step_fn = step_function(compile_mode)
    valid = torch.zeros(total, capacity, dtype=torch.bool, device=device)
    valid[:, :width] = attn.bool()
    position = attn.long().sum(dim=1)  # [B] the position of each row's next token
    out = torch.full((total, max_new_tokens), pad_id, dtype=ids.dtype, device=device)
    out_logp = torch.zeros(total, max_new_tokens, dtype=torch.float32, device=device)
    done = torch.arange(total, device=device) >= rows  # the filling rows write padding throughout
    slot = torch.zeros(1, dtype=torch.long, device=device)
    steps = torch.zeros((), dtype=torch.long, device=device)  # the longest completion so far
    for step in range(max_new_tokens):
        steps = torch.where(done.all(), steps, step + 1)  # a row still running writes this column
        token, logp = _next_tokens(w, x, sampling, step, eos)
        token = token.masked_fill(done, pad_id)
        out[:, step] = token
        out_logp[:, step] = logp.masked_fill(done, 0.0)
        done = done | torch.isin(token, eos)
        if step == max_new_tokens - 1 or ((step + 1) % check_every == 0 and bool(done.all())):
            break
        slot.fill_(width + step)
        valid.index_fill_(1, slot, True)
        cos, sin = table_cos[position][:, None, None], table_sin[position][:, None, None]
        x = step_fn(w, token, cache, slot, cos, sin, valid[:, None, None, :])
        position = position + 1
    steps_run = int(steps)
    return out[:rows, :steps_run], out_logp[:rows, :steps_run]
