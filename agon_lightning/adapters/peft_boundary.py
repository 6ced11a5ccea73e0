"""Every use of PEFT's internals, in one place, checked against the installed PEFT.

Two policies on one base need three things PEFT has no public API for: switching adapters
without PEFT's walks over every module (and without its ``set_adapter`` freezing the other
adapter mid-step), a faster LoRA forward, and reading each layer's ``A``, ``B`` and scaling to
merge them for sampling or to measure the adapters. So the code reads and writes PEFT's layer
state — ``_disable_adapters``, ``_active_adapter``, ``lora_A``/``lora_B``/``scaling``, the
layer's ``forward`` — and a PEFT release that renames one of them would not raise: training
would go on with the adapter silently off, or on.

Why a boundary rather than our own LoRA layer (as torchtune and litgpt do): the adapters are
saved, loaded, merged and served as PEFT adapters (bundles, ``agon export``, vLLM's LoRA
loader all read PEFT's layout), and ``target_modules`` covers every architecture PEFT knows.
Owning the layer would mean owning that format and that coverage too. Keeping PEFT and
confining what we rely on to this module costs one list — :data:`LAYER_NEEDS` and
:data:`MODEL_NEEDS` — and :func:`check_peft`, which every model built with adapters passes
through (``attach_adapters``) and a test runs on the installed PEFT: a changed internal is an
error naming the attribute, at start-up, never a wrong run.

Nothing outside this module touches a ``_``-attribute of PEFT, replaces a layer's forward,
or reads ``lora_A``/``lora_B``/``scaling`` directly.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from importlib.metadata import version
from typing import Any, NamedTuple

from torch import Tensor, nn

BASE_ADAPTER = "__base__"  # PEFT's name for "no adapter" in a mixed-adapter batch

# What this module relies on, and what kind of value each must be. A LoRA ``Linear`` layer:
LAYER_NEEDS: dict[str, type | tuple[type, ...] | str] = {
    "_disable_adapters": bool,  # the layer's off switch (flipped directly: adapters_off)
    "_active_adapter": (str, list),  # which adapter applies (set directly: set_switch)
    "merged_adapters": list,
    # PEFT's properties over the attributes above (checked after them, so a missing attribute is
    # named rather than the property that reads it)
    "active_adapters": list,
    "disable_adapters": bool,
    "merged": bool,
    "lora_A": nn.ModuleDict,
    "lora_B": nn.ModuleDict,
    "lora_dropout": nn.ModuleDict,
    "scaling": dict,
    "lora_variant": dict,
    "base_layer": nn.Module,
    "in_features": int,
    "out_features": int,
    "forward": "method",  # replaced per instance by fast_lora's fused forward
}
# The ``PeftModel``:
MODEL_NEEDS: dict[str, type | tuple[type, ...] | str] = {
    "set_adapter": "method",
    "disable_adapter": "method",  # a context manager
    "get_base_model": "method",
    "active_adapter": str,
}


class PeftChanged(RuntimeError):
    """The installed PEFT lacks an internal this package relies on (the message names it)."""


def _kind_ok(value: Any, kind: type | tuple[type, ...] | str) -> bool:
    return callable(value) if kind == "method" else isinstance(value, kind)


def _check(obj: Any, needs: dict[str, Any], what: str) -> None:
    for name, kind in needs.items():
        if not hasattr(obj, name):
            raise PeftChanged(
                f"peft {version('peft')}: {what} {type(obj).__name__} has no attribute {name!r}, which "
                "agon_lightning.adapters.peft_boundary relies on; install a PEFT this package supports "
                "(pyproject.toml) or update the boundary"
            )
        value = getattr(obj, name)
        if not _kind_ok(value, kind):
            expected = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
            raise PeftChanged(
                f"peft {version('peft')}: {what} {type(obj).__name__}.{name} is a {type(value).__name__}, "
                f"expected {expected}; agon_lightning.adapters.peft_boundary relies on it"
            )


def check_peft(model: nn.Module) -> None:
    """Raise :class:`PeftChanged`, naming the attribute, unless ``model`` has every internal relied on.

    Args:
        model: A ``PeftModel`` with at least one LoRA ``Linear`` layer.
    """
    _check(model, MODEL_NEEDS, "the model")
    layers = lora_layers(model)
    if not layers:
        raise PeftChanged(f"peft {version('peft')}: {type(model).__name__} has no LoRA Linear layer to check")
    _check(layers[0], LAYER_NEEDS, "the LoRA layer")


# ---------------------------------------------------------------------------- finding layers
def lora_layers(model: nn.Module) -> list[Any]:
    """PEFT's LoRA ``Linear`` layers of ``model``."""
    from peft.tuners.lora.layer import Linear

    return [m for m in model.modules() if isinstance(m, Linear)]


def tuner_layers(model: nn.Module) -> list[Any]:
    """Every adapter layer of ``model`` (LoRA or another PEFT tuner)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


def only_these_adapter_layers(model: nn.Module, layers: list[Any]) -> bool:
    """Whether ``layers`` are all of ``model``'s adapter layers (no other tuner, no trained head)."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    kinds = (BaseTunerLayer, AuxiliaryTrainingWrapper)
    return sum(isinstance(m, kinds) for m in model.modules()) == len(layers)


def base_model(model: nn.Module) -> nn.Module:
    """The transformers model under ``model``'s adapters; ``model`` itself when it has none."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def wrapped(layer: Any) -> nn.Module:
    """The layer a LoRA layer wraps (``base_layer``: one level down)."""
    return layer.base_layer


def base_layer(module: nn.Module) -> nn.Module:
    """The wrapped layer of an adapter layer; ``module`` itself for a plain layer."""
    return module.get_base_layer() if hasattr(module, "get_base_layer") else module


def is_lora_layer(module: nn.Module) -> bool:
    """Whether ``module`` is a PEFT LoRA layer (of any kind: Linear, Embedding, ...)."""
    from peft.tuners.lora.layer import LoraLayer

    return isinstance(module, LoraLayer)


# ---------------------------------------------------------------------------- a layer's forward
def replace_forward(layer: Any, forward: Callable[..., Tensor]) -> None:
    """Run ``forward(layer, x, ...)`` instead of PEFT's ``forward`` on this one layer."""
    layer.forward = types.MethodType(forward, layer)


def set_forward(layer: Any, forward: Callable[..., Tensor]) -> None:
    """Run the bound callable ``forward(x, ...)`` instead of PEFT's ``forward`` on this one layer."""
    layer.forward = forward


def restore_forward(layer: Any) -> None:
    """PEFT's own ``forward`` on ``layer`` again."""
    layer.__dict__.pop("forward", None)


def forward_replaced(layer: Any) -> bool:
    """Whether ``layer`` runs a forward of ours (:func:`replace_forward`)."""
    return "forward" in layer.__dict__


def peft_forward(layer: Any) -> Callable[..., Tensor]:
    """PEFT's ``forward`` of ``layer``'s class, to call as ``peft_forward(layer)(layer, x)``."""
    return type(layer).forward


# ---------------------------------------------------------------------------- a layer's adapters
class LoraPart(NamedTuple):
    """One adapter of one LoRA layer: ``x → scaling · B(A(dropout(x)))``."""

    a: nn.Module
    b: nn.Module
    dropout: nn.Module
    scaling: float


def lora_part(layer: Any, name: str) -> LoraPart:
    """Adapter ``name`` of ``layer``."""
    return LoraPart(layer.lora_A[name], layer.lora_B[name], layer.lora_dropout[name], layer.scaling[name])


def has_adapter(layer: Any, name: str | None) -> bool:
    """Whether ``layer`` holds LoRA adapter ``name``."""
    return name is not None and name in getattr(layer, "lora_A", {})


def has_variant(layer: Any, name: str | None = None) -> bool:
    """Whether adapter ``name`` of ``layer`` is a LoRA variant (DoRA, ...); any adapter when ``None``."""
    return bool(layer.lora_variant) if name is None else name in layer.lora_variant


def has_lora_bias(layer: Any) -> bool:
    """Whether any adapter of ``layer`` has a bias on ``B``."""
    return any(getattr(b, "bias", None) is not None for b in layer.lora_B.values())


def active_names(layer: Any) -> list[str]:
    """The adapters ``layer`` applies now, among those it holds."""
    return [n for n in layer.active_adapters if n in layer.lora_A]


def merged_or_special(layer: Any) -> bool:
    """Whether ``layer`` has merged adapters or is switched off through PEFT's property."""
    return bool(layer.disable_adapters or layer.merged)


def has_merged(layer: Any) -> bool:
    """Whether any adapter of ``layer`` is merged into its base weight."""
    return bool(layer.merged_adapters)


# ---------------------------------------------------------------------------- switching
def layer_off(layer: Any) -> bool:
    """``layer``'s own off switch (a plain attribute read: cheap in a forward)."""
    return layer._disable_adapters


def switch_state(layer: Any) -> tuple[Any, bool]:
    """``(active adapter, off)`` of ``layer``, as :func:`set_switch` puts it back."""
    return layer._active_adapter, layer._disable_adapters


def set_switch(layer: Any, state: tuple[Any, bool]) -> None:
    """Set ``layer``'s active adapter and off switch directly (no ``requires_grad`` changes)."""
    layer._active_adapter, layer._disable_adapters = state


def active_marker(layer: Any) -> Any:
    """The object PEFT holds as ``layer``'s active adapter (``set_adapter`` assigns a new one)."""
    return layer._active_adapter


@contextlib.contextmanager
def layers_off(model: nn.Module, layers: list[Any]) -> Iterator[None]:
    """Every adapter of ``layers`` off by their own switches, restored exactly on exit.

    The same state as PEFT's ``disable_adapter()`` where ``layers`` are all of ``model``'s
    adapter layers, without its three walks over every module and its ``set_adapter`` on exit.
    """
    before = [layer._disable_adapters for layer in layers]
    was_disabled = getattr(model, "_adapters_disabled", False)
    try:
        for layer in layers:
            layer._disable_adapters = True
        model._adapters_disabled = True
        yield
    finally:
        for layer, disabled in zip(layers, before):
            layer._disable_adapters = disabled
        model._adapters_disabled = was_disabled


def peft_disabled(model: nn.Module) -> contextlib.AbstractContextManager[None]:
    """PEFT's own ``disable_adapter()`` (restores with ``set_adapter``: see :func:`activate`)."""
    return model.disable_adapter()


def activate(model: nn.Module, name: str, trainable: list[nn.Parameter]) -> None:
    """Make ``name`` the active adapter, keeping every adapter trainable.

    PEFT's ``set_adapter`` freezes the inactive adapters; both policies train every step
    (one joint backward), so their ``requires_grad`` is restored here from ``trainable``,
    the list decided once, by adapter name, when the adapters were attached. Switching visits
    every module of the model, so it is skipped when ``name`` is already active.
    """
    if model.active_adapter != name:
        model.set_adapter(name)
    restore_trainable(trainable)


def restore_trainable(trainable: list[nn.Parameter] | None) -> None:
    """``requires_grad`` back on ``trainable`` (after PEFT's ``set_adapter`` turned some off)."""
    for p in trainable or []:
        p.requires_grad_(True)


def active_adapter(model: nn.Module) -> str | None:
    """The adapter ``model``'s LoRA layers apply now: ``None`` when they are off.

    Raises:
        ValueError: ``model`` has no adapter layers.
    """
    layer = next(iter(tuner_layers(model)), None)
    if layer is None:
        raise ValueError(f"{type(model).__name__} has no LoRA layers")
    return None if layer.disable_adapters else layer.active_adapters[0]


def our_name(name: str | None) -> str | None:
    """An adapter name as our signatures spell it: ``None`` for adapters off (PEFT's :data:`BASE_ADAPTER` too)."""
    return None if name == BASE_ADAPTER else name


def peft_names(names: list[str | None]) -> list[str]:
    """Per-row adapter names as PEFT's mixed-adapter batch reads them: :data:`BASE_ADAPTER` for ``None``."""
    return [BASE_ADAPTER if name is None else name for name in names]
