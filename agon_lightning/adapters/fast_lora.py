"""A leaner forward for PEFT's LoRA ``Linear`` layers.

PEFT computes an adapted projection as ``base(x) + B(A(dropout(x))) * s``: the scaling
multiplies and the sum adds a full ``[tokens, out]`` tensor in the forward, and the backward
multiplies the ``[tokens, out]`` gradient by ``s`` once more. On a small model those
elementwise passes over the widest activations (the MLP's) cost as much as the LoRA matmuls.
:func:`lora_forward` computes the same sum with one ``addmm`` that accumulates
``s · A(x) @ Bᵀ`` into the base output (the scaling rides in the GEMM's ``alpha``, the
gradient passes through the sum untouched). Same math, same parameters, same autograd
leaves; anything it does not cover — several active adapters with variants (DoRA), a LoRA
bias, mixed-adapter batches, merged or disabled adapters, sharded weights, mismatched
dtypes — goes to PEFT's own forward.

Sampling with the active adapter merged into a copy of each weight, which runs through the
layers this module installs, lives with the sampler: :mod:`agon_lightning.rollout.merged`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from agon_lightning.adapters import peft_boundary as peft
from agon_lightning.adapters.peft_boundary import lora_layers
from agon_lightning.moved import moved_names

_LAYERS = "_agon_lora_layers"  # install()'s layers, where they are the model's only adapter layers


def install(model: nn.Module) -> int:
    """Route every LoRA ``Linear`` of ``model`` through :func:`lora_forward`; returns how many.

    Where these are the model's only adapter layers, they are also remembered for
    :func:`adapters_disabled`.
    """
    layers = lora_layers(model)
    for layer in layers:
        peft.replace_forward(layer, lora_forward)
    model.__dict__[_LAYERS] = layers if peft.only_these_adapter_layers(model, layers) else None
    return len(layers)


def uninstall(model: nn.Module) -> None:
    """Put PEFT's own forward back on every LoRA ``Linear`` of ``model``."""
    for layer in lora_layers(model):
        peft.restore_forward(layer)
    model.__dict__.pop(_LAYERS, None)


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[bool]:
    """Every adapter off by each remembered layer's flag; yields ``False`` (nothing done) without them.

    PEFT's ``disable_adapter()`` walks every module of the model three times (status, off, on
    again through ``set_adapter``); on a small model that costs as much as a forward. Where
    :func:`install` found LoRA ``Linear`` layers only, flipping their ``_disable_adapters`` flag
    (PEFT's own per-layer switch) and the model's ``_adapters_disabled`` is the same state,
    restored exactly on exit, with no ``requires_grad`` flag touched.
    """
    layers = model.__dict__.get(_LAYERS)
    if not layers:
        yield False
        return
    with peft.layers_off(model, layers):
        yield True


def _fused(layer: Any, name: str, x: Tensor, base_dtype: torch.dtype) -> bool:
    """Whether adapter ``name`` of ``layer`` is plain LoRA that :func:`lora_forward` may fuse."""
    part = peft.lora_part(layer, name)
    weight = part.b.weight
    return (
        not peft.has_variant(layer, name)
        and getattr(part.b, "bias", None) is None
        and weight.dim() == 2
        and weight.shape[1] == part.a.weight.shape[0]
        and weight.dtype == base_dtype
        and x.dtype == part.a.weight.dtype
    )


def lora_forward(self: Any, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``base(x) + s · B(A(dropout(x)))`` for each active adapter, the sum fused into ``addmm``."""
    peft_forward = peft.peft_forward(self)
    base = peft.wrapped(self)
    if peft.layer_off(self) and not (args or kwargs or peft.has_merged(self)):
        return base(x)  # what PEFT's forward does with adapters off and nothing merged
    if args or kwargs or peft.merged_or_special(self):
        return peft_forward(self, x, *args, **kwargs)
    names = peft.active_names(self)
    base_weight = base.weight
    if not all(_fused(self, n, x, base_weight.dtype) for n in names):
        return peft_forward(self, x)
    result = base(x)
    if result.dtype != base_weight.dtype:
        return peft_forward(self, x)
    shape = result.shape
    out = result.reshape(-1, shape[-1])  # [tokens, out]
    for name in names:
        part = peft.lora_part(self, name)
        a = part.a(part.dropout(x))  # [..., r]
        out = torch.addmm(out, a.reshape(-1, a.shape[-1]), part.b.weight.t(), alpha=part.scaling)
    return out.view(shape)


# names defined here before they moved (moved.MOVED_NAMES), with a DeprecationWarning until moved.REMOVED_AFTER
__getattr__ = moved_names(__name__)
