"""Sampling with a decode loop of our own for the Llama family (Qwen3, Qwen2, Llama, Mistral).

On a small model ``transformers.generate`` spends most of each new token outside the
arithmetic: per layer seven projections, four RMSNorms of several ops each, the rotary
embedding, a cache that grows by concatenation, and the Python of the modules, the mask
builders and the logits processors around them. The arithmetic of one decode step is the
same few matrix products whoever calls them, so here it is called directly: each layer's
``q, k, v`` projections are one matrix product over their concatenated weights and
``gate, up`` another, with the active LoRA adapter merged in (``W + s · B A``, computed into
new tensors once per call: nothing is written to the model) — in float32; in a lower
precision the base stays as it is and the low-rank term ``s · (x Aᵀ) Bᵀ`` is added in float32,
as PEFT's own forward adds it (a merged ``W + s · B A`` rounded to bf16 loses much of a small
update, and then samples a policy the trainer does not have); RMSNorm is one fused op in
float32; the key/value cache is preallocated, written in place and doubled when full; each
distinct prompt is prefilled once for the samples that share it; and rows that have finished
are dropped from the batch, so a batch does not keep paying for its early finishers.

The model supplies what differs between families (the rotary table, the activation, biases,
the per-head ``q_norm``/``k_norm`` of Qwen3) as weights and plain functions: the loop calls no
``nn.Module`` at all (:mod:`agon_lightning.rollout.plain`: the activation as the torch function
it computes, the rotary table from the module's ``inv_freq``), so no strategy's module hooks run
while sampling, and ranks that sample different lengths leave identical module traces (ZeRO-3
compares them at the next forward). Sampling applies
``transformers``' own temperature, top-k and top-p warpers in ``generate``'s order, then draws
by inverting the cumulative distribution (:func:`draw`), so the distribution sampled is the
one ``generate`` samples; the log-prob of each drawn token under that distribution is
returned beside it (what ``train/logprob_mismatch`` and ``grpo.tis_cap`` read). Greedy outputs equal ``generate``'s (``tests/test_decode.py``). The
loop is plain torch and runs on any device; on a GPU the fast path is vLLM. Anything this loop
does not reproduce exactly — another architecture, a sliding window, a length-dependent rotary
scaling, an activation with weights of its own, a generation config with a repetition penalty or
banned words, sharded weights, DoRA — is reported by :func:`unsupported` and sampled by ``generate`` instead
(under DeepSpeed ZeRO-3 ``HFRollout`` stops with the reason: ``generate`` calls the hooked modules).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from agon_lightning.adapters import peft_boundary as peft
from agon_lightning.adapters.peft_boundary import active_adapter, our_name
from agon_lightning.infra.errors import UsageError
from agon_lightning.rollout.plain import Activation, RotaryTable, activation_unsupported, plain_activation
from agon_lightning.rollout.sampling import drawn_logprobs, is_sharded

ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM")
STATIC_ROPE = ("default", "linear", "llama3", "yarn")  # a rotary table that depends on the position only
# Generation-config settings this loop does not apply, with the values at which they do nothing.
INERT_SETTINGS: dict[str, tuple[Any, ...]] = {
    "num_beams": (None, 1),
    "num_return_sequences": (None, 1),
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "sequence_bias": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "min_length": (None, 0),
    "min_p": (None,),
    "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
    "exponential_decay_length_penalty": (None,),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
    "stop_strings": (None,),
    "renormalize_logits": (None, False),
}
CACHE_CHUNK = 128  # completion positions the key/value cache starts with; it doubles when full


@dataclass
class Sampling:
    """How the next token is chosen: ``greedy``, or sampled after ``generate``'s warpers."""

    greedy: bool
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_new_tokens: int = 0

    def warpers(self) -> list[Any]:
        """``transformers``' own warpers, in ``generate``'s order (temperature, top-k, top-p)."""
        from transformers.generation.logits_process import (
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        if self.greedy:
            return []
        out: list[Any] = []
        if self.temperature != 1.0:
            out.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k:
            out.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            out.append(TopPLogitsWarper(self.top_p))
        return out


@dataclass
class Layer:
    """One decoder layer's weights, with the adapter merged and the projections fused.

    Projections are stored as ``[in, out]``, contiguous: on a CPU, a product of a few rows with
    a contiguous ``[in, out]`` matrix took about half the time of one with the transpose of an
    ``[out, in]`` weight (8 rows × 128 → 1024: 22 µs against 40 µs).
    """

    ln1: Tensor
    ln2: Tensor
    qkv: Tensor  # [H, (heads + 2 kv_heads) · head_dim]
    qkv_bias: Tensor | None
    o: Tensor
    o_bias: Tensor | None
    q_norm: Tensor | None  # Qwen3's per-head RMSNorm weights
    k_norm: Tensor | None
    gate_up: Tensor  # [H, 2 I]
    gate_up_bias: Tensor | None
    down: Tensor
    down_bias: Tensor | None
    # Unmerged adapter ``(s·Aᵀ [in, R], Bᵀ [R, out])`` in float32 per fused projection (low precision only).
    qkv_lora: tuple[Tensor, Tensor] | None = None
    o_lora: tuple[Tensor, Tensor] | None = None
    gate_up_lora: tuple[Tensor, Tensor] | None = None
    down_lora: tuple[Tensor, Tensor] | None = None


@dataclass
class Weights:
    """What a decode step reads: the layers, the embeddings and the shapes."""

    layers: list[Layer]
    embed: Tensor
    norm: Tensor
    head: Tensor
    rotary: RotaryTable  # plain functions of the weights: sampling calls no module (and no hook)
    act: Activation
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    scaling: float
    context: int | None = None  # the model's max_position_embeddings: no longer prompt is prefilled


# ---------------------------------------------------------------------------- what is supported
def _generation_settings(model: nn.Module, kwargs: dict[str, Any]) -> Any:
    """The model's generation config with ``kwargs`` on top, as ``generate`` would merge them."""
    from transformers import GenerationConfig

    config = copy.deepcopy(getattr(model, "generation_config", None) or GenerationConfig())
    for key, value in kwargs.items():
        if hasattr(config, key):
            setattr(config, key, value)
    return config


def unsupported(model: nn.Module, generate_kwargs: dict[str, Any]) -> str | None:
    """Why this loop cannot sample ``model`` exactly as ``generate(**generate_kwargs)`` would; ``None`` if it can."""
    lm = peft.base_model(model)
    if type(lm).__name__ not in ARCHITECTURES:
        return f"{type(lm).__name__} is not one of {ARCHITECTURES}"
    config = lm.config
    decoder = lm.get_decoder()
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "a sliding-window attention layer"
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return "sliding-window attention"
    if getattr(decoder.rotary_emb, "rope_type", "default") not in STATIC_ROPE:
        return f"rotary scaling {decoder.rotary_emb.rope_type!r} depends on the sequence length"
    for layer in decoder.layers:
        attn = layer.self_attn
        if getattr(attn, "sliding_window", None) is not None:
            return "sliding-window attention"
        if abs(float(attn.scaling) - attn.head_dim**-0.5) > 1e-12:
            return f"attention scaling {attn.scaling} is not head_dim ** -0.5"
    act = decoder.layers[0].mlp.act_fn
    reason = activation_unsupported(act, getattr(config, "hidden_act", None))
    if reason is not None:
        return reason
    if getattr(lm.get_output_embeddings(), "bias", None) is not None:
        return "an output layer with a bias"
    if is_sharded(decoder.embed_tokens.weight, (config.vocab_size, config.hidden_size)):
        return "sharded weights"
    for module in lm.modules():
        if peft.is_lora_layer(module):
            weight = peft.base_layer(module).weight
            if peft.has_merged(module) or is_sharded(weight, (module.out_features, module.in_features)):
                return "merged or sharded adapter layers"
            if peft.has_variant(module) or peft.has_lora_bias(module):
                return "a LoRA variant (DoRA) or a LoRA bias"
            if not peft.layer_off(module) and len(module.active_adapters) > 1:
                return f"several active adapters {module.active_adapters}"
        elif isinstance(module, nn.Linear) and is_sharded(
            module.weight, (module.out_features, module.in_features)
        ):
            return "sharded weights"
    settings = _generation_settings(lm, generate_kwargs)
    for key, inert in INERT_SETTINGS.items():
        if getattr(settings, key, None) not in inert:
            return f"generation setting {key}={getattr(settings, key)!r}"
    return None


def sampling_of(model: nn.Module, generate_kwargs: dict[str, Any]) -> Sampling:
    """The token choice ``generate(**generate_kwargs)`` makes for ``model``, read from the merged settings."""
    settings = _generation_settings(peft.base_model(model), generate_kwargs)
    greedy = not settings.do_sample
    return Sampling(
        greedy=greedy,
        temperature=float(settings.temperature if settings.temperature is not None else 1.0),
        top_k=int(settings.top_k or 0),
        top_p=float(settings.top_p if settings.top_p is not None else 1.0),
        min_new_tokens=int(settings.min_new_tokens or 0),
    )


# ---------------------------------------------------------------------------- weights
def current_adapter(model: nn.Module) -> str | None:
    """:func:`~agon_lightning.adapters.peft_boundary.active_adapter`, and ``None`` for a model without LoRA layers."""
    try:
        return active_adapter(model)
    except ValueError:  # no LoRA layers: a plain model
        return None


Projection = tuple[Tensor, Tensor | None, tuple[Tensor, Tensor] | None]  # weight [out, in], bias, (s·A, B)


def _projection(module: nn.Module, adapter: str | None) -> Projection:
    """A projection's ``(weight [out, in], bias, unmerged adapter)`` for ``adapter`` (``None``: the base).

    In float32 the adapter is merged (``W + s · B A``) and the third item is ``None``; in a lower
    precision the weight is the base's and the third is ``(s · A [r, in], B [out, r])`` in float32.
    """
    base = peft.base_layer(module)
    weight = base.weight
    if not peft.has_adapter(module, adapter):
        return weight, base.bias, None
    part = peft.lora_part(module, adapter)
    a, b, scale = part.a.weight, part.b.weight, part.scaling
    if weight.dtype != torch.float32:
        return weight, base.bias, (a.float() * scale, b.float())
    return torch.addmm(weight, b.to(weight.dtype), a.to(weight.dtype), alpha=scale), base.bias, None


def _fused(*projections: Projection) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor] | None]:
    """The projections side by side: one ``[in, sum of out]`` matrix, its bias, and their adapters.

    The adapters' ``A`` stack into one ``[in, R]`` and their ``B`` into a block-diagonal ``[R, sum
    of out]``, so the low-rank term of the fused product is two matmuls.
    """
    weight = torch.cat([w for w, _, _ in projections]).t().contiguous()
    bias = None
    if any(b is not None for _, b, _ in projections):
        bias = torch.cat([b if b is not None else w.new_zeros(w.shape[0]) for w, b, _ in projections])
    if all(ab is None for _, _, ab in projections):
        return weight, bias, None
    ranks = [0 if ab is None else ab[0].shape[0] for _, _, ab in projections]
    a = weight.new_zeros(weight.shape[0], sum(ranks), dtype=torch.float32)  # [in, R]
    b = weight.new_zeros(sum(ranks), weight.shape[1], dtype=torch.float32)  # [R, out]
    row = col = 0
    for (w, _, ab), rank in zip(projections, ranks):
        if ab is not None:
            a[:, row : row + rank] = ab[0].t()
            b[row : row + rank, col : col + w.shape[0]] = ab[1].t()
        row, col = row + rank, col + w.shape[0]
    return weight, bias, (a, b)


def weights(model: nn.Module, adapter: str | None) -> Weights:
    """The decode step's weights for ``adapter`` (``None``: the base alone), merged and fused."""
    adapter = our_name(adapter)  # PEFT's name for the base, from a caller of the old spelling
    lm = peft.base_model(model)
    decoder = lm.get_decoder()
    layers = []
    with torch.no_grad():
        for layer in decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            qkv, qkv_bias, qkv_lora = _fused(
                *(_projection(p, adapter) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
            )
            o, o_bias, o_lora = _fused(_projection(attn.o_proj, adapter))
            gate_up, gate_up_bias, gate_up_lora = _fused(
                _projection(mlp.gate_proj, adapter), _projection(mlp.up_proj, adapter)
            )
            down, down_bias, down_lora = _fused(_projection(mlp.down_proj, adapter))
            q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
            layers.append(
                Layer(
                    layer.input_layernorm.weight,
                    layer.post_attention_layernorm.weight,
                    qkv,
                    qkv_bias,
                    o,
                    o_bias,
                    None if q_norm is None else q_norm.weight,
                    None if k_norm is None else k_norm.weight,
                    gate_up,
                    gate_up_bias,
                    down,
                    down_bias,
                    qkv_lora,
                    o_lora,
                    gate_up_lora,
                    down_lora,
                )  # fmt: skip
            )
    config = lm.config
    first = decoder.layers[0]
    return Weights(
        layers=layers, embed=decoder.embed_tokens.weight, norm=decoder.norm.weight,
        head=lm.get_output_embeddings().weight, rotary=RotaryTable.of(decoder.rotary_emb),
        act=plain_activation(first.mlp.act_fn, getattr(config, "hidden_act", None)),
        heads=config.num_attention_heads, kv_heads=config.num_key_value_heads, head_dim=first.self_attn.head_dim,
        intermediate=first.mlp.gate_proj.out_features, eps=float(config.rms_norm_eps),
        scaling=float(first.self_attn.scaling), context=getattr(config, "max_position_embeddings", None),
    )  # fmt: skip


# ---------------------------------------------------------------------------- the forward
def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # Low precision: transformers' order of operations (variance in float32, the weight after the cast).
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate(x: Tensor, cos: Tensor, signed_sin: Tensor) -> Tensor:
    """transformers' ``x·cos + rotate_half(x)·sin``, as ``x·cos + roll(x)·(−sin₁, sin₂)``: the same products."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


def draw(probs: Tensor) -> Tensor:
    """One token ``[B]`` per row of ``probs`` ``[B, V]``, by inverting the cumulative distribution.

    The same distribution as ``torch.multinomial(probs, 1)`` with one uniform number a row
    instead of one per vocabulary entry (the default shape's whole sampling pass takes 0.88× the
    time with it on one CPU thread: ``python -m benchmarks.bench_levers``). The sum runs in
    float64, so a token's share of it is exact to ~1e-16; a token of probability 0 is never
    drawn (``right=True`` skips the flat steps of the sum).
    """
    cdf = probs.double().cumsum(dim=-1)  # [B, V]
    u = torch.rand(probs.shape[0], 1, dtype=cdf.dtype, device=probs.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[1] - 1)


def _linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, lora: tuple[Tensor, Tensor] | None = None
) -> Tensor:
    """``x @ weight (+ bias)`` for an ``[in, out]`` weight, plus ``(x Aᵀ) Bᵀ`` in float32 for an unmerged adapter.

    The order of PEFT's forward in low precision: the base product in the weight's dtype, the
    low-rank term in float32 added to it, the sum cast back.
    """
    out = torch.matmul(x, weight)
    if bias is not None:
        out = out + bias
    if lora is None:
        return out
    return (out.float() + torch.matmul(torch.matmul(x.float(), lora[0]), lora[1])).to(out.dtype)


class _Cache:
    """Keys and values ``[B, kv_heads, capacity, head_dim]`` per layer, written in place, grown by doubling."""

    def __init__(self, w: Weights, rows: int, capacity: int, like: Tensor) -> None:
        shape = (rows, w.kv_heads, capacity, w.head_dim)
        self.keys = [like.new_zeros(shape) for _ in w.layers]
        self.values = [like.new_zeros(shape) for _ in w.layers]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def grow(self, capacity: int) -> None:
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                bigger = t.new_zeros(t.shape[0], t.shape[1], capacity, t.shape[3])
                bigger[:, :, : t.shape[2]] = t
                store[i] = bigger

    def select(self, rows: Tensor) -> None:
        self.keys = [t.index_select(0, rows) for t in self.keys]
        self.values = [t.index_select(0, rows) for t in self.values]


def _forward(
    w: Weights,
    x: Tensor,
    cache: _Cache,
    start: int,
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
    slot: Tensor | None = None,
) -> Tensor:
    """Run ``x`` ``[B, S, H]`` (positions ``start … start+S-1`` of the cache) through every layer.

    ``cos``/``sin`` ``[B, 1, S, d]`` (``sin`` signed for :func:`_rotate`); ``mask`` ``[B, 1, S,
    start+S]`` (True = may attend; or the scores it adds, :func:`additive_mask`). With ``slot`` (a
    one-element index tensor, ``S`` = 1: the static-shape step of :mod:`agon_lightning.rollout.static_decode`), the new keys and values are
    written at ``slot`` and attention runs over the whole cache under ``mask`` ``[B, 1, 1,
    capacity]``: every shape of the step is then the same from one token to the next.
    """
    b, s, _ = x.shape
    q_size, kv_size = w.heads * w.head_dim, w.kv_heads * w.head_dim
    for i, layer in enumerate(w.layers):
        h = _rms_norm(x, layer.ln1, w.eps)
        q, k, v = _linear(h, layer.qkv, layer.qkv_bias, layer.qkv_lora).split(
            [q_size, kv_size, kv_size], dim=-1
        )
        q = q.view(b, s, w.heads, w.head_dim)
        k = k.view(b, s, w.kv_heads, w.head_dim)
        if layer.q_norm is not None:
            q = _rms_norm(q, layer.q_norm, w.eps)
        if layer.k_norm is not None:
            k = _rms_norm(k, layer.k_norm, w.eps)
        q = _rotate(q.transpose(1, 2), cos, sin)  # [B, heads, S, d]
        k = _rotate(k.transpose(1, 2), cos, sin)
        v = v.view(b, s, w.kv_heads, w.head_dim).transpose(1, 2)
        if slot is None:
            cache.keys[i][:, :, start : start + s] = k
            cache.values[i][:, :, start : start + s] = v
            keys, values = cache.keys[i][:, :, : start + s], cache.values[i][:, :, : start + s]
        else:
            keys, values = cache.keys[i].index_copy_(2, slot, k), cache.values[i].index_copy_(2, slot, v)
        if s == 1:  # one new token: the query heads of a key/value head are the rows of one product
            o = F.scaled_dot_product_attention(
                q.reshape(b, w.kv_heads, w.heads // w.kv_heads, w.head_dim), keys, values, attn_mask=mask,
                scale=w.scaling,
            ).reshape(b, w.heads, 1, w.head_dim)  # fmt: skip
        else:
            o = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=w.scaling, enable_gqa=w.heads != w.kv_heads
            )  # [B, heads, S, d]
        x = x + _linear(o.transpose(1, 2).reshape(b, s, q_size), layer.o, layer.o_bias, layer.o_lora)
        h = _rms_norm(x, layer.ln2, w.eps)
        gate, up = _linear(h, layer.gate_up, layer.gate_up_bias, layer.gate_up_lora).split(
            [w.intermediate, w.intermediate], dim=-1
        )
        x = x + _linear(w.act(gate) * up, layer.down, layer.down_bias, layer.down_lora)
    return x


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``mask`` (True = may attend) as the ``0`` / ``-inf`` scores attention adds, the form it would build in every layer."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def _next_tokens(
    w: Weights, hidden: Tensor, sampling: Sampling, step: int, eos: Tensor
) -> tuple[Tensor, Tensor]:
    """``([B] next tokens, [B] their log-probs)`` from the last hidden states ``[B, H]``, as ``generate`` chooses them.

    The log-prob is under the distribution drawn from (after the warpers; greedy: the plain softmax).
    """
    scores = F.linear(_rms_norm(hidden, w.norm, w.eps), w.head).float()  # [B, V]
    if step < sampling.min_new_tokens:
        scores[:, eos] = -float("inf")
    if sampling.greedy:
        token = scores.argmax(dim=-1)
        return token, drawn_logprobs(scores, token)
    for warp in sampling.warpers():
        scores = warp(None, scores)
    token = draw(F.softmax(scores, dim=-1))
    return token, drawn_logprobs(scores, token)


def check_prompt_fits(attn: Tensor, context: int | None) -> None:
    """Refuse prompts (``attn`` ``[B, P]``, 1 on a prompt's tokens) longer than ``context`` tokens.

    The data is checked against the context when a run starts
    (:mod:`agon_lightning.data.lengths`); this is the second line, for a prompt built during the
    run (a challenger's, which holds the rival's summary) or handed over by other code.
    """
    if context is None or attn.shape[1] <= context:
        return
    lengths = attn.sum(dim=1)
    longest = int(lengths.max())
    if longest > context:
        over = int((lengths > context).sum())
        raise UsageError(
            f"a prompt to sample has {longest} tokens, more than the model's context of {context} "
            f"(max_position_embeddings; {over} of the batch's {len(lengths)} rows are over it); shorten the "
            "prompts (the problems, the prompt templates, the summarizer's output), or take a model with a "
            "longer context"
        )


def rotary_tables(w: Weights, length: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(cos, signed sin)`` ``[length, d]`` for positions ``0 … length-1`` (``sin`` signed for :func:`_rotate`)."""
    table_cos, table_sin = w.rotary(torch.arange(length, device=device)[None], w.embed.dtype)
    half = w.head_dim // 2
    return table_cos[0], torch.cat([-table_sin[0, :, :half], table_sin[0, :, half:]], dim=-1)


def prefill(
    w: Weights,
    ids: Tensor,
    attn: Tensor,
    counts: Tensor | None,
    capacity: int,
    table_cos: Tensor,
    table_sin: Tensor,
) -> tuple[_Cache, Tensor]:
    """The cache ``capacity`` positions wide holding each row's prompt, and each row's last hidden state ``[B, H]``.

    Each distinct prompt (``counts`` consecutive rows share one; ``None``: every row its own) is
    prefilled once: causal within the prompt, left padding masked (a padding query sees itself,
    so no row of the softmax is empty); its cache is then repeated for the rows that share it.
    """
    device = ids.device
    total, width = ids.shape
    if counts is None:
        counts = torch.ones(total, dtype=torch.long, device=device)
    first = torch.cumsum(counts, 0) - counts  # each distinct prompt's first row
    p_ids, p_attn = ids[first], attn[first].bool()
    positions = (p_attn.long().cumsum(-1) - 1).clamp(min=0)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    mask = (causal & p_attn[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)
    cache = _Cache(w, len(first), capacity, w.embed)
    x = _forward(
        w, F.embedding(p_ids, w.embed), cache, 0, table_cos[positions][:, None], table_sin[positions][:, None],
        mask[:, None],
    )[:, -1]  # fmt: skip
    repeat = torch.repeat_interleave(torch.arange(len(first), device=device), counts.to(device))  # [B]
    if len(first) != total:
        cache.select(repeat)
        x = x.index_select(0, repeat)
    return cache, x


@torch.no_grad()
def decode(
    w: Weights,
    ids: Tensor,
    attn: Tensor,
    max_new_tokens: int,
    eos_ids: list[int],
    pad_id: int,
    sampling: Sampling,
    counts: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Completion ids ``[B, steps]`` for left-padded prompts ``ids``/``attn`` ``[B, P]``, pad after each EOS,
    and each drawn token's sampling log-prob ``[B, steps]`` (float32, 0 after the EOS).

    As ``generate`` returns them after the prompt: ``steps`` is the longest completion (every
    row stops at its first EOS, and all stop at ``max_new_tokens``).

    Args:
        counts: ``[G]`` consecutive rows per distinct prompt (each is prefilled once); ``None``: every row.

    Raises:
        UsageError: a prompt is longer than the model's context (checked before anything is
            allocated: the prefill's mask alone grows with the square of the prompt).
    """
    device = ids.device
    total, width = ids.shape
    check_prompt_fits(attn, w.context)
    eos = torch.tensor(eos_ids, device=device)
    capacity = width + min(max_new_tokens, CACHE_CHUNK)
    table_cos, table_sin = rotary_tables(w, width + max_new_tokens, device)
    cache, x = prefill(w, ids, attn, counts, capacity, table_cos, table_sin)
    valid = torch.zeros(total, capacity, dtype=torch.bool, device=device)
    valid[:, :width] = attn.bool()
    position = attn.long().sum(dim=1)  # [B] the position of each row's next token
    rows = torch.arange(total, device=device)  # which rows of the output the batch's rows are
    out = torch.full((total, max_new_tokens), pad_id, dtype=ids.dtype, device=device)
    out_logp = torch.zeros(total, max_new_tokens, dtype=torch.float32, device=device)
    done = torch.zeros(total, dtype=torch.bool, device=device)
    steps = 0
    for step in range(max_new_tokens):
        token, logp = _next_tokens(w, x, sampling, step, eos)
        token = token.masked_fill(done, pad_id)  # [b]; padding once done
        out[rows, step] = token
        out_logp[rows, step] = logp.masked_fill(done, 0.0)
        steps = step + 1
        done = done | torch.isin(token, eos)
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        if 4 * int(done.sum()) >= len(rows):  # drop the finished rows once they are a quarter of the batch
            keep = torch.nonzero(~done).squeeze(1)
            rows, token, position, valid, done = (
                rows[keep],
                token[keep],
                position[keep],
                valid[keep],
                done[keep],
            )
            cache.select(keep)
        slot = width + step
        if slot >= cache.capacity:
            cache.grow(min(width + 2 * (cache.capacity - width), width + max_new_tokens))
            valid = torch.cat([valid, valid.new_zeros(len(rows), cache.capacity - valid.shape[1])], dim=1)
        valid[:, slot] = True
        cos, sin = table_cos[position][:, None, None], table_sin[position][:, None, None]
        mask = additive_mask(valid[:, None, None, : slot + 1], x.dtype)  # once for every layer
        x = _forward(w, F.embedding(token[:, None], w.embed), cache, slot, cos, sin, mask)[:, 0]
        position = position + 1
    return out[:, :steps], out_logp[:, :steps]
