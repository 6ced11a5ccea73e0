"""Sampling with the active adapter merged into a copy of each adapted weight.

Sampling runs no backward, so :func:`merged_for_sampling` gives each adapted layer
``W + s · B @ A`` for the active adapter, computed once into a *separate* tensor: the
projection then costs one matmul and no Python hop per token. The base weights are never
written (nothing to restore, so nothing to restore inexactly), and the merged copy is used
only while autograd is off, so it can never reach a backward. Where the weights are sharded
(DeepSpeed ZeRO-3, FSDP: a layer's weight is not its full ``[out, in]`` matrix, or is an FSDP2
``DTensor``) nothing is merged and sampling uses the LoRA path, with a warning saying so. Nor
is anything merged in a precision below float32: ``W + s · B A`` rounded to bf16 loses much of
a small update, so the sampler would not be the policy being trained; the LoRA path adds the
low-rank term in float32, exactly as the trainer's forward does.

The layers are those :func:`agon_lightning.adapters.fast_lora.install` routed through
:func:`~agon_lightning.adapters.fast_lora.lora_forward`; anything the merged copy does not
serve goes back to that forward.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from agon_lightning.adapters import peft_boundary as peft
from agon_lightning.adapters.fast_lora import lora_forward
from agon_lightning.adapters.peft_boundary import lora_layers
from agon_lightning.rollout.sampling import is_sharded


def _sharded(layer: Any) -> bool:
    return is_sharded(peft.wrapped(layer).weight, (layer.out_features, layer.in_features))


@contextlib.contextmanager
def merged_for_sampling(model: nn.Module, adapter: str | None) -> Iterator[bool]:
    """While inside, layers with :func:`lora_forward` run ``adapter`` as one merged matmul when autograd is off.

    Yields whether it merged: ``False`` for the base (``adapter=None``), a model without
    installed layers, base weights below float32 (the sum would round the update away), or
    sharded weights (ZeRO-3/FSDP, warned). The merged weights are dropped on exit; the base
    weights are never modified.
    """
    layers = [m for m in lora_layers(model) if peft.forward_replaced(m) and peft.has_adapter(m, adapter)]
    if adapter is None or not layers or any(peft.wrapped(m).weight.dtype != torch.float32 for m in layers):
        yield False
        return
    if any(_sharded(m) for m in layers):
        warnings.warn(
            "the base weights are sharded (DeepSpeed ZeRO-3 or FSDP), so the adapter is not merged for "
            "sampling: rollouts run through the unmerged LoRA layers (slower, same outputs)",
            stacklevel=3,
        )
        yield False
        return
    try:
        with torch.no_grad():
            for m in layers:
                if peft.has_variant(m, adapter):
                    continue
                part = peft.lora_part(m, adapter)
                w = peft.wrapped(m).weight
                a, b = part.a.weight.to(w.dtype), part.b.weight.to(w.dtype)
                merged = torch.addmm(w, b, a, alpha=part.scaling)  # [out, in]
                peft.set_forward(m, _merged_forward(m, merged))
        yield True
    finally:
        for m in layers:
            peft.replace_forward(m, lora_forward)


def _merged_forward(layer: Any, merged: Tensor) -> Any:
    """``layer``'s forward while sampling: one matmul with ``merged``, the LoRA path for anything else.

    The merged copy serves only while autograd is off and the adapters are as they were when
    it was made (PEFT's ``set_adapter`` and ``disable_adapter`` assign new values, so an identity
    check sees any change); the per-call checks are plain attribute reads, no PEFT properties.
    """
    bias, active = peft.wrapped(layer).bias, peft.active_marker(layer)

    def forward(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if (
            args
            or kwargs
            or torch.is_grad_enabled()
            or peft.layer_off(layer)
            or peft.active_marker(layer) is not active
        ):
            return lora_forward(layer, x, *args, **kwargs)
        return nn.functional.linear(x, merged, bias)

    return forward
