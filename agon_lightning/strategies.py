"""Scale-out helpers for Lightning's own strategies (never a home-made launcher).

Under DDP every step is one joint backward through both adapters, so every trainable
parameter receives a gradient and ``find_unused_parameters`` stays off. Under FSDP and
DeepSpeed ZeRO-3 Lightning runs ``training_step`` and ``validation_step`` inside the wrapped
model's forward, where each wrapped layer gathers its own shards as generation reaches it
(correct, but one all-gather per layer per generated token). Outside those hooks — the
evaluation before the first and after the last step — :func:`full_parameters` gathers the
whole model once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from lightning.pytorch.strategies import FSDPStrategy


class DecoderLayerFSDPStrategy(FSDPStrategy):
    """FSDP that shards at each decoder layer, found by class name on the loaded model.

    Args:
        layer_names: Class names of the blocks to wrap (``Qwen3DecoderLayer``,
            ``LlamaDecoderLayer``, …); resolved on the model, so a config needs no import.
        **kwargs: Passed to :class:`~lightning.pytorch.strategies.FSDPStrategy`.
    """

    def __init__(self, layer_names: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.layer_names = layer_names or ["Qwen3DecoderLayer"]

    def _setup_model(self, model: Any) -> Any:
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        classes = {type(m) for m in model.modules() if type(m).__name__ in self.layer_names}
        if not classes:
            found = sorted({type(m).__name__ for m in model.modules() if "Layer" in type(m).__name__})
            raise ValueError(
                f"no module of class {self.layer_names} in the model; layer classes present: {found}"
            )
        self.kwargs["auto_wrap_policy"] = ModuleWrapPolicy(classes)
        return super()._setup_model(model)


@contextlib.contextmanager
def full_parameters(trainer: Any) -> Iterator[None]:
    """Gather sharded parameters (FSDP, DeepSpeed ZeRO-3) for code run outside the forward."""
    strategy = getattr(trainer, "strategy", None)
    if isinstance(strategy, FSDPStrategy) and strategy.model is not None:
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(strategy.model, writeback=False, recurse=True):
            yield
        return
    if type(strategy).__name__ == "DeepSpeedStrategy" and getattr(strategy, "zero_stage_3", False):
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(strategy.model.parameters()), modifier_rank=None):
            yield
        return
    yield
