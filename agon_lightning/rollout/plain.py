"""The decode loop's activation and rotary table as plain functions: sampling calls no module.

Under a sharding strategy every submodule of the model carries the strategy's hooks, and each
call of a module goes through them: DeepSpeed ZeRO-3 appends the module to its trace of the
step, and the next forward compares that trace across ranks. The decode loop runs one forward
per generated token, so a module called there (the activation once per layer per token, the
rotary embedding once per rollout) puts a rank-dependent number of entries in the trace: ranks
that sample different lengths then fail at the next step's forward. The rule here is by design:
sampling on gathered weights calls **no** ``nn.Module`` under any strategy. The loop reads the
weights (:func:`agon_lightning.rollout.decode_loop.weights`) and computes everything else with
the functions below, which take tensors and never enter a module's ``__call__`` (where every
hook, DeepSpeed's, FSDP's and torch's global ones, lives).

* :func:`plain_activation` maps the MLP's activation module to a function: ``transformers``'
  common activations (``hidden_act`` ``silu``/``swish``, ``gelu``, ``gelu_pytorch_tanh``,
  ``relu``) to the torch functional that computes them; any other activation without weights,
  buffers or submodules to its own ``forward``, bound (the module's arithmetic without its
  ``__call__``), once a probe call shows that this forward calls no module either (torch's
  global module hooks see none). An activation with weights or submodules of its own, or whose
  forward calls a module (``gelu_10`` calls a ``GELUActivation``), has no hook-free form:
  :func:`activation_unsupported` names it, and the loop is not used for the model (under ZeRO-3
  the rollout then stops with that reason).
* :class:`RotaryTable` computes the rotary ``cos``/``sin`` from the module's ``inv_freq`` and
  ``attention_scaling`` as the Llama-family rotary modules do (a static rotary type only: the
  loop refuses the rest).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

Activation = Callable[[Tensor], Tensor]

# transformers' activation class name -> the torch functional it computes (the same op, bit for bit;
# tests/test_decode_hook_free.py checks each against transformers' own module).
FUNCTIONAL: dict[str, Activation] = {
    "SiLUActivation": F.silu,
    "SiLU": F.silu,  # torch.nn.SiLU, transformers' "swish"
    "ReLU": F.relu,
}


def _functional(act: nn.Module) -> Activation | None:
    """The torch functional ``act`` computes, for the classes whose result depends on a setting too."""
    name = type(act).__name__
    if name in FUNCTIONAL:
        return FUNCTIONAL[name]
    inner = getattr(act, "act", None)  # GELUActivation / GELUTanh keep the function they call
    if name == "GELUActivation" and inner is F.gelu:
        return F.gelu
    if name == "GELUTanh" and isinstance(inner, functools.partial) and inner.func is F.gelu:
        return functools.partial(F.gelu, approximate="tanh")
    return None


def activation_unsupported(act: object, hidden_act: object = None) -> str | None:
    """Why ``act`` has no hook-free form (weights or submodules of its own, a module called in its
    forward); ``None`` if it has one."""
    if not isinstance(act, nn.Module):
        return None if callable(act) else f"activation {hidden_act!r} ({type(act).__name__}) is not callable"
    if _functional(act) is not None:
        return None
    own = [n for n, _ in act.named_parameters()] + [n for n, _ in act.named_buffers()]
    children = [n for n, _ in act.named_children()]
    if own or children:
        return (
            f"activation {hidden_act!r} ({type(act).__name__}) has weights or submodules of its own "
            f"({', '.join(own + children)}), so it cannot run outside its module"
        )
    called = modules_called(act.forward)
    if called:
        return f"activation {hidden_act!r} ({type(act).__name__}) calls the module {called[0]} in its forward"
    return None


def modules_called(fn: Activation) -> list[str]:
    """The modules (class names) ``fn`` calls on a probe tensor, seen by torch's global forward hooks."""
    calls: list[str] = []
    handle = nn.modules.module.register_module_forward_pre_hook(lambda m, _: calls.append(type(m).__name__))
    try:
        with torch.no_grad():
            fn(torch.linspace(-3.0, 3.0, 8))
    finally:
        handle.remove()
    return calls


def plain_activation(act: object, hidden_act: object = None) -> Activation:
    """A function computing ``act`` that enters no module's ``__call__`` (so no hook runs).

    Raises:
        ValueError: ``act`` has weights, buffers or submodules of its own (named), calls a module
            in its forward (named), or is not callable.
    """
    reason = activation_unsupported(act, hidden_act)
    if reason is not None:
        raise ValueError(reason)
    if not isinstance(act, nn.Module):
        return act  # type: ignore[return-value]  # a plain function already
    return _functional(act) or act.forward  # the module's own arithmetic, without its __call__


@dataclass
class RotaryTable:
    """The rotary embedding of a Llama-family model as a function of positions: no module call.

    The arithmetic of ``LlamaRotaryEmbedding.forward`` (and Qwen3's, Qwen2's, Mistral's), on a
    copy of its ``inv_freq`` buffer and its ``attention_scaling``: ``freqs = position ·
    inv_freq`` in float32, ``cos/sin`` of ``[freqs, freqs]`` times the scaling, cast to ``dtype``.
    """

    inv_freq: Tensor
    attention_scaling: float

    @classmethod
    def of(cls, rotary: nn.Module) -> RotaryTable:
        inv_freq = getattr(rotary, "inv_freq", None)
        if not isinstance(inv_freq, Tensor):
            raise ValueError(f"the rotary embedding {type(rotary).__name__} has no inv_freq buffer")
        return cls(inv_freq.detach().float(), float(getattr(rotary, "attention_scaling", 1.0)))

    def __call__(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` ``[*positions.shape, head_dim]`` for integer ``positions``."""
        freqs = positions[..., None].float() * self.inv_freq.to(positions.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(dtype), (emb.sin() * self.attention_scaling).to(dtype)
