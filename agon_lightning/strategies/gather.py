"""Whole weights where shards will not do: sampling, adapter files, weight statistics.

Under FSDP2 and ZeRO-3 each process holds a shard of every weight, and a sharded module
gathers its weights when its forward starts and frees them when it ends. That suits the
update (a layer is gathered once per forward, once more per backward), and not sampling,
which runs a forward per generated token: one all-gather per layer per token. Code that
reads a weight directly (the decode loop's merged projections, an adapter written for vLLM
or for a bundle, the divergence statistics) would see only a shard.

Two ways out, each a collective that every process enters at the same point:

* :func:`gathered` holds the whole model gathered for a block (one rollout): FSDP2 unshards
  every sharded module and keeps it so across forwards; ZeRO-3 gathers every parameter. The
  decode loop then reads whole weights and runs no module hooks at all.
* :func:`full_tensors` returns whole copies of some parameters (the adapters) and leaves the
  model as it is: a few MB instead of the whole base.

Neither does anything for a model that is not sharded (one device, DDP, ZeRO-2).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from weakref import WeakKeyDictionary, WeakSet

from torch import Tensor, nn

# fully_shard's reshard_after_forward of each module sharded by agon_lightning.strategies.fsdp2,
# put back when a gathered block ends.
RESHARD_AFTER_FORWARD: WeakKeyDictionary[nn.Module, bool] = WeakKeyDictionary()
_GATHERED: WeakSet[nn.Module] = WeakSet()  # models inside a gathered() block now


def is_lora(name: str) -> bool:
    """Whether a parameter name is a LoRA adapter weight's (PEFT's ``lora_A`` / ``lora_B``)."""
    return "lora_" in name


def of_adapter(name: str, adapter: str) -> bool:
    """Whether a parameter name is a LoRA weight of adapter ``adapter`` (``....lora_A.alpha.weight``)."""
    return is_lora(name) and f".{adapter}." in name


def fsdp2_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` sharded with FSDP2's ``fully_shard``."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return []
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def zero3_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters of ``model`` that DeepSpeed ZeRO-3 partitions (they carry a ``ds_id``)."""
    return [p for p in model.parameters() if hasattr(p, "ds_id")]


@contextlib.contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """The whole of ``model`` gathered on every process while inside; a collective (every rank enters).

    FSDP2: every sharded module is unsharded once and kept unsharded across the forwards of
    the block (``set_reshard_after_forward(False)``), then resharded and given back its own
    setting. ZeRO-3: every parameter gathered (``GatheredParameters``); modules' own hooks may
    still free a layer after its forward, so code inside should read the weights directly
    (the decode loop does) rather than call the modules. Nothing happens for an unsharded model.
    """
    if model in _GATHERED:  # inside another gathered block of the same model: whole already
        yield
        return
    modules = fsdp2_modules(model)
    if modules:
        _GATHERED.add(model)
        for m in modules:
            m.set_reshard_after_forward(False, recurse=False)
        for m in modules:
            m.unshard()
        try:
            yield
        finally:
            _GATHERED.discard(model)
            for m in modules:
                m.reshard()
                m.set_reshard_after_forward(RESHARD_AFTER_FORWARD.get(m, True), recurse=False)
        return
    params = [p for p in zero3_parameters(model) if not _zero3_available(p)]
    if params:
        import deepspeed

        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            yield
        return
    yield


def full_tensors(model: nn.Module, keep: Callable[[str], bool] = is_lora) -> dict[str, Tensor]:
    """Whole, detached copies of the parameters of ``model`` whose names ``keep`` accepts.

    A collective under FSDP2 and ZeRO-3 (every rank calls it, the same parameters in the same
    order); a plain copy otherwise. Inside :func:`gathered` the weights are whole already.
    """
    named = [(n, p) for n, p in model.named_parameters() if keep(n)]
    partitioned = [p for _, p in named if hasattr(p, "ds_id") and not _zero3_available(p)]
    with contextlib.ExitStack() as stack:
        if partitioned:
            import deepspeed

            stack.enter_context(deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None))
        return {n: whole(p).detach().clone() for n, p in named}


def whole_parameter(model: nn.Module, param: nn.Parameter) -> Tensor:
    """A whole, detached copy of one parameter of ``model`` (a collective under FSDP2 and ZeRO-3)."""
    name = next((n for n, p in model.named_parameters() if p is param), None)
    if name is None:
        raise ValueError(f"the parameter of shape {tuple(param.shape)} is not one of the model's")
    return full_tensors(model, keep=lambda n: n == name)[name]


def whole(t: Tensor) -> Tensor:
    """``t`` itself, or the full tensor of a DTensor (an all-gather)."""
    full = getattr(t, "full_tensor", None)
    return full() if callable(full) else t


def local(t: Tensor) -> Tensor:
    """This process's part of ``t``: the local shard of a DTensor, else ``t``."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def local_grads(params: list[nn.Parameter]) -> list[Tensor]:
    """The gradients of ``params`` as this process holds them: its shard under FSDP2 and ZeRO-3.

    DeepSpeed keeps gradients off ``.grad`` (in its partitioned buffers); they are read through
    its ``safe_get_*_grad`` (under ZeRO-1/2 the whole gradient: a collective, as every rank
    reads the same parameters in the same order).
    """
    grads = []
    for p in params:
        if p.grad is not None:
            grads.append(local(p.grad))
        elif hasattr(p, "ds_id") or hasattr(p, "_hp_mapping"):
            from deepspeed.utils import safe_get_full_grad, safe_get_local_grad

            g = safe_get_local_grad(p) if hasattr(p, "ds_id") else safe_get_full_grad(p)
            if g is not None:
                grads.append(g)
    return grads


def _zero3_available(p: Any) -> bool:
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    return p.ds_status == ZeroParamStatus.AVAILABLE
