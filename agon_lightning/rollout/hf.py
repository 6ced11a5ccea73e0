"""The Hugging Face backend: sampling on the training model itself.

:class:`HFRollout` runs our decode loop (:mod:`agon_lightning.rollout.decode_loop`) for
Llama-family models and ``model.generate`` for the rest, with the active adapter merged for
sampling where that is exact (:mod:`agon_lightning.rollout.merged`). The interface it
implements is in :mod:`agon_lightning.rollout.base`; its names are re-exported here, where
they were defined before the interface had a module of its own.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from agon_lightning.adapters.peft_boundary import base_model, our_name, peft_names
from agon_lightning.adapters.shared_prompt import cache_argument, plain_cache, prompt_cache, prompt_groups
from agon_lightning.infra.errors import UsageError
from agon_lightning.rollout import decode_loop as decode
from agon_lightning.rollout import static_decode as static
from agon_lightning.rollout.base import (
    Rollout,
    RolloutBatch,
    check_generate_args,
    completion_mask,
    encode_prompts,
    stop_token_ids,
)
from agon_lightning.rollout.merged import merged_for_sampling
from agon_lightning.rollout.sampling import LogprobRecorder

# the interface's names, importable from here as before the interface had a module of its own
__all__ = ["HFRollout", "Rollout", "RolloutBatch", "completion_mask", "encode_prompts", "stop_token_ids"]

_SAID: set[str] = set()


def _say_once(message: str) -> None:
    """Tell the user ``message`` once per process (a fallback would otherwise repeat every step)."""
    if message not in _SAID:
        _SAID.add(message)
        rank_zero_info(message)


class HFRollout(Rollout):
    """Sampling on the training model itself: our fused decode loop for Llama-family models,
    batched ``model.generate`` with the KV cache for everything else.

    Args:
        max_new_tokens: Completion budget; longer completions are truncated.
        temperature: Sampling temperature (also used to compute the log-probs).
        top_p: Nucleus sampling mass.
        top_k: Top-k cutoff (0 = off).
        max_batch_size: Most sequences per ``generate`` call (0 = all at once).
        merge_adapter: Sample with the active adapter merged into a copy of each adapted weight
            (one matmul per projection instead of three; the copy lives while sampling; not with
            sharded weights, see :mod:`agon_lightning.rollout.merged`).
        fused_decode: Sample Llama-family models (Qwen3, Qwen2, Llama, Mistral) with our own
            decode loop (fused projections with the adapter merged, a preallocated cache,
            finished rows dropped; :mod:`agon_lightning.rollout.decode_loop`); anything it does not reproduce
            exactly goes to ``generate``, except under DeepSpeed ZeRO-3, where ``generate`` would run
            every partitioned module's hooks a rank-dependent number of times (the loop calls no
            module): there a model the loop cannot sample stops with the reason.
        max_staleness: 0 only: this backend samples the very weights the update changes, so it
            cannot sample ahead of it (a ValueError names any other value).
        static_cache: Run the decode loop with every shape fixed (a cache as wide as prompt +
            ``max_new_tokens``, every row to the end; :mod:`agon_lightning.rollout.static_decode`):
            for an accelerator, where a step's launches cost more than its arithmetic. Greedy
            tokens are the decode loop's; on a CPU the shrinking batch of the default is faster.
        compile_mode: With ``static_cache``, compile the decode step (``reduce-overhead``: CUDA
            graphs on a GPU; ``default``: fused kernels); ``None``: not compiled.
    """

    def __init__(
        self,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_batch_size: int = 0,
        merge_adapter: bool = True,
        fused_decode: bool = True,
        max_staleness: int = 0,
        static_cache: bool = False,
        compile_mode: str | None = None,
    ) -> None:
        self._keep_sampling(max_new_tokens, temperature, top_p, top_k)
        self._keep_staleness(max_staleness)
        if max_batch_size < 0:
            raise ValueError(f"max_batch_size must be >= 0, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        self.merge_adapter = merge_adapter
        self.fused_decode = fused_decode
        if compile_mode not in static.COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {static.COMPILE_MODES}, got {compile_mode!r}")
        if compile_mode is not None and not static_cache:
            raise ValueError(
                f"compile_mode={compile_mode!r} compiles the static-shape decode step: set static_cache=True "
                "(the default loop's shapes change every token, so a compiled step would recompile)"
            )
        if static_cache and not fused_decode:
            raise ValueError("static_cache=True is a mode of the decode loop: it needs fused_decode=True")
        self.static_cache = static_cache
        self.compile_mode = compile_mode

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        check_generate_args(prompts, adapter_names)
        ids, attn = encode_prompts(tokenizer, prompts, num_samples, next(model.parameters()).device)
        eos_ids = stop_token_ids(model, tokenizer)
        kwargs: dict[str, Any] = dict(
            max_new_tokens=self.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=eos_ids,
            use_cache=True,
        )
        if greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(
                do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k or None
            )
        rows = (
            None
            if adapter_names is None
            else [our_name(n) for n in adapter_names for _ in range(num_samples)]
        )
        # Before either path allocates: generate() would fill a cache for a prompt past the context too.
        decode.check_prompt_fits(attn, getattr(model.config, "max_position_embeddings", None))
        reason = decode.unsupported(model, kwargs) if self.fused_decode else "fused_decode is off"
        if reason is None:
            completion, logprobs = self._decode(
                model, ids, attn, rows, eos_ids, tokenizer.pad_token_id, kwargs
            )
        else:
            zero3 = any(hasattr(p, "ds_id") for p in model.parameters())
            if zero3 and not self.fused_decode:  # asked for by name (benchmarks compare the paths)
                _say_once(
                    "HFRollout(fused_decode=False) under DeepSpeed ZeRO-3: generate runs every partitioned "
                    "module's hooks once per token; ranks that sample different lengths then fail at the next "
                    "training forward"
                )
            elif zero3:
                raise UsageError(
                    "under DeepSpeed ZeRO-3 HFRollout samples only with its decode loop, which calls no "
                    "module: generate would run every partitioned module's hooks once per token, a number "
                    "that differs between ranks, and the next step's forward fails. The decode loop cannot "
                    f"sample this model: {reason}"
                    + (
                        " (sample inside agon_lightning.strategies.gathered(model), as AgonModule does)"
                        if reason == "sharded weights"
                        else ". Use rollout=vllm, or another strategy (ddp, fsdp2, deepspeed_zero2)"
                    )
                )
            if self.fused_decode:
                _say_once(f"HFRollout samples with generate, not the decode loop: {reason}")
            completion, logprobs = self._generate(model, ids, attn, rows, tokenizer.pad_token_id, kwargs)
        mask, truncated = completion_mask(completion, eos_ids)
        # generate() pads finished rows with pad == eos for many tokenizers: the mask handles it.
        completion = completion.masked_fill(mask == 0, tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
        logprobs = logprobs * mask
        return RolloutBatch(ids, attn, completion, mask, texts, mask.sum(dim=1), truncated, logprobs)

    def _generate(
        self,
        model: Any,
        ids: Tensor,
        attn: Tensor,
        rows: list[str | None] | None,
        pad_id: int,
        kwargs: dict[str, Any],
    ) -> tuple[Tensor, Tensor]:
        """Completions ``[B, T]`` from ``model.generate``, ``max_batch_size`` rows at a time, and their log-probs.

        With ``merge_adapter``, the active adapter is merged into a copy of each adapted weight
        while sampling (:func:`agon_lightning.rollout.merged.merged_for_sampling`, float32 only); a
        mixed-adapter batch runs through PEFT's per-row LoRA. The temperature, top-k and top-p
        warpers run as our own processors, in ``generate``'s order, followed by a
        :class:`~agon_lightning.rollout.sampling.LogprobRecorder`: the log-probs are of the scores drawn from.
        """
        step = self.max_batch_size or ids.shape[0]
        merge = decode.current_adapter(model) if self.merge_adapter and rows is None else None
        warpers = decode.sampling_of(model, kwargs).warpers()
        kwargs = {**kwargs, **({"temperature": 1.0, "top_p": 1.0, "top_k": 0} if warpers else {})}
        pieces = []
        with merged_for_sampling(model, merge):
            for start in range(0, ids.shape[0], step):
                if rows is not None:
                    kwargs = {**kwargs, "adapter_names": peft_names(rows[start : start + step])}
                chunk_ids, chunk_attn = ids[start : start + step], attn[start : start + step]
                shared = self._shared_prefill(model, chunk_ids, chunk_attn) if rows is None else {}
                recorder = LogprobRecorder()
                out = model.generate(
                    input_ids=chunk_ids, attention_mask=chunk_attn, logits_processor=[*warpers, recorder],
                    **kwargs, **shared,
                )[:, ids.shape[1] :]  # fmt: skip
                pieces.append((out, recorder.logprobs(out)))
        width = max(p.shape[1] for p, _ in pieces)
        pad = torch.nn.functional.pad
        return (
            torch.cat([pad(p, (0, width - p.shape[1]), value=pad_id) for p, _ in pieces]),
            torch.cat([pad(lp, (0, width - lp.shape[1])) for _, lp in pieces]),
        )

    def _decode(
        self,
        model: Any,
        ids: Tensor,
        attn: Tensor,
        rows: list[str | None] | None,
        eos_ids: list[int],
        pad_id: int,
        kwargs: dict[str, Any],
    ) -> tuple[Tensor, Tensor]:
        """Completions ``[B, T]`` and their log-probs from :func:`agon_lightning.rollout.decode_loop.decode`, one adapter's rows at a time.

        A mixed-adapter batch is split by adapter (each row's tokens are the same as in a batch of
        its own adapter's rows), and each part runs ``max_batch_size`` rows at a time.
        """
        sampling = decode.sampling_of(model, kwargs)
        names = rows if rows is not None else [decode.current_adapter(model)] * ids.shape[0]
        step = self.max_batch_size or ids.shape[0]
        pieces: list[tuple[Tensor, Tensor, Tensor]] = []
        for name in dict.fromkeys(names):
            weights = decode.weights(model, name)
            index = torch.tensor([i for i, n in enumerate(names) if n == name], device=ids.device)
            for start in range(0, len(index), step):
                part = index[start : start + step]
                part_ids, part_attn = ids[part], attn[part]
                args = (weights, part_ids, part_attn, self.max_new_tokens, eos_ids, pad_id, sampling,
                        prompt_groups(part_ids, part_attn))  # fmt: skip
                if self.static_cache:
                    out, logp = static.decode_static(*args, compile_mode=self.compile_mode)
                else:
                    out, logp = decode.decode(*args)
                pieces.append((part, out, logp))
        width = max(out.shape[1] for _, out, _ in pieces)
        completion = ids.new_full((ids.shape[0], width), pad_id)
        logprobs = torch.zeros(ids.shape[0], width, device=ids.device)
        for part, out, logp in pieces:
            completion[part, : out.shape[1]] = out
            logprobs[part, : out.shape[1]] = logp
        return completion, logprobs

    @staticmethod
    def _shared_prefill(model: Any, ids: Tensor, attn: Tensor) -> dict[str, Any]:
        """``generate``'s cache argument holding one prefill per distinct prompt, repeated; ``{}`` if none.

        All but each prompt's last token are prefilled (``generate`` needs one uncached token),
        with the position ids ``generate`` itself gives a left-padded prompt.
        """
        base = base_model(model)
        decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
        counts = prompt_groups(ids, attn) if ids.shape[1] > 1 else None
        if counts is None or decoder is None or not plain_cache(decoder):
            return {}
        positions = (attn.long().cumsum(-1) - 1).masked_fill(attn == 0, 1)
        _, cache = prompt_cache(decoder, ids[:, :-1], attn[:, :-1], positions[:, :-1], counts)
        return {cache_argument(decoder): cache}
