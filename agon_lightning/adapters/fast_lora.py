"""A leaner forward for PEFT's LoRA ``Linear`` layers, and sampling with the active adapter merged.

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

Sampling runs no backward, so :func:`merged_for_sampling` gives each adapted layer
``W + s · B @ A`` for the active adapter, computed once into a *separate* tensor: the
projection then costs one matmul and no Python hop per token. The base weights are never
written (nothing to restore, so nothing to restore inexactly), and the merged copy is used
only while autograd is off, so it can never reach a backward. Where the weights are sharded
(DeepSpeed ZeRO-3, FSDP: a layer's weight is not its full ``[out, in]`` matrix) nothing is
merged and sampling uses the LoRA path, with a warning saying so.
"""

from __future__ import annotations

import contextlib
import types
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

_LAYERS = "_agon_lora_layers"  # install()'s layers, where they are the model's only adapter layers


def lora_layers(model: nn.Module) -> list[Any]:
    """PEFT's LoRA ``Linear`` layers of ``model`` (the ones :func:`install` speeds up)."""
    from peft.tuners.lora.layer import Linear

    return [m for m in model.modules() if isinstance(m, Linear)]


def install(model: nn.Module) -> int:
    """Route every LoRA ``Linear`` of ``model`` through :func:`lora_forward`; returns how many.

    Where these are the model's only adapter layers, they are also remembered for
    :func:`adapters_disabled`.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    layers = lora_layers(model)
    for layer in layers:
        layer.forward = types.MethodType(lora_forward, layer)
    kinds = (BaseTunerLayer, AuxiliaryTrainingWrapper)
    only_lora = sum(isinstance(m, kinds) for m in model.modules()) == len(layers)
    model.__dict__[_LAYERS] = layers if only_lora else None
    return len(layers)


def uninstall(model: nn.Module) -> None:
    """Put PEFT's own forward back on every LoRA ``Linear`` of ``model``."""
    for layer in lora_layers(model):
        layer.__dict__.pop("forward", None)
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
    before = [layer._disable_adapters for layer in layers]
    was_disabled = getattr(model, "_adapters_disabled", False)
    try:
        for layer in layers:
            layer._disable_adapters = True
        model._adapters_disabled = True
        yield True
    finally:
        for layer, disabled in zip(layers, before):
            layer._disable_adapters = disabled
        model._adapters_disabled = was_disabled


def _fused(layer: Any, name: str, x: Tensor, base_dtype: torch.dtype) -> bool:
    """Whether adapter ``name`` of ``layer`` is plain LoRA that :func:`lora_forward` may fuse."""
    lora_b = layer.lora_B[name]
    weight = lora_b.weight
    return (
        name not in layer.lora_variant
        and getattr(lora_b, "bias", None) is None
        and weight.dim() == 2
        and weight.shape[1] == layer.lora_A[name].weight.shape[0]
        and weight.dtype == base_dtype
        and x.dtype == layer.lora_A[name].weight.dtype
    )


def lora_forward(self: Any, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``base(x) + s · B(A(dropout(x)))`` for each active adapter, the sum fused into ``addmm``."""
    peft_forward = type(self).forward
    if self._disable_adapters and not (args or kwargs or self.merged_adapters):
        return self.base_layer(x)  # what PEFT's forward does with adapters off and nothing merged
    if args or kwargs or self.disable_adapters or self.merged:
        return peft_forward(self, x, *args, **kwargs)
    names = [n for n in self.active_adapters if n in self.lora_A]
    base_weight = self.base_layer.weight
    if not all(_fused(self, n, x, base_weight.dtype) for n in names):
        return peft_forward(self, x)
    result = self.base_layer(x)
    if result.dtype != base_weight.dtype:
        return peft_forward(self, x)
    shape = result.shape
    out = result.reshape(-1, shape[-1])  # [tokens, out]
    for name in names:
        a = self.lora_A[name](self.lora_dropout[name](x))  # [..., r]
        out = torch.addmm(
            out, a.reshape(-1, a.shape[-1]), self.lora_B[name].weight.t(), alpha=self.scaling[name]
        )
    return out.view(shape)


def _sharded(layer: Any) -> bool:
    weight = layer.base_layer.weight
    return weight.dim() != 2 or tuple(weight.shape) != (layer.out_features, layer.in_features)


@contextlib.contextmanager
def merged_for_sampling(model: nn.Module, adapter: str | None) -> Iterator[bool]:
    """While inside, layers with :func:`lora_forward` run ``adapter`` as one merged matmul when autograd is off.

    Yields whether it merged: ``False`` for the base (``adapter=None``), a model without
    installed layers, or sharded weights (ZeRO-3/FSDP, warned). The merged weights are
    dropped on exit; the base weights are never modified.
    """
    layers = [m for m in lora_layers(model) if "forward" in m.__dict__ and adapter in m.lora_A]
    if adapter is None or not layers:
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
                if adapter in m.lora_variant:
                    continue
                a, b = m.lora_A[adapter].weight, m.lora_B[adapter].weight
                w = m.base_layer.weight
                merged = torch.addmm(w, b.to(w.dtype), a.to(w.dtype), alpha=m.scaling[adapter])  # [out, in]
                m.forward = _merged_forward(m, merged)
        yield True
    finally:
        for m in layers:
            m.forward = types.MethodType(lora_forward, m)


def _merged_forward(layer: Any, merged: Tensor) -> Any:
    """``layer``'s forward while sampling: one matmul with ``merged``, the LoRA path for anything else.

    The merged copy serves only while autograd is off and the adapters are as they were when
    it was made (PEFT's ``set_adapter`` and ``disable_adapter`` assign new values, so an identity
    check sees any change); the per-call checks are plain attribute reads, no PEFT properties.
    """
    bias, active = layer.base_layer.bias, layer._active_adapter

    def forward(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if (
            args
            or kwargs
            or torch.is_grad_enabled()
            or layer._disable_adapters
            or layer._active_adapter is not active
        ):
            return lora_forward(layer, x, *args, **kwargs)
        return nn.functional.linear(x, merged, bias)

    return forward
