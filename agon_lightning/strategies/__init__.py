"""Scale-out: Lightning's strategies, set up so each computes DDP's step for two adapters.

* DDP: Lightning's own (``configs/strategy/ddp.yaml``). Both roles' losses go into one joint
  backward, so every trainable parameter gets a gradient each step and
  ``find_unused_parameters`` stays off.
* :class:`FSDP2Strategy` (``fsdp2.yaml``): ``fully_shard`` on each decoder layer and the decoder.
* :class:`DeepSpeedZeroStrategy` (``deepspeed_zero2.yaml``, ``deepspeed_zero3.yaml``): ZeRO-2 or
  ZeRO-3, on GPUs or CPU processes, with the adapters' init exactly as configured.

Sampling under the sharded ones gathers the weights once per rollout
(:func:`~agon_lightning.strategies.gather.gathered`), not once per layer per token.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import FSDPStrategy

from agon_lightning.game.names import BASE
from agon_lightning.infra.errors import UsageError

from .collectives import sum_over_processes
from .fsdp2 import FSDP2Strategy
from .gather import full_tensors, gathered, local, local_grads, whole_parameter
from .zero import DeepSpeedZeroStrategy

__all__ = [
    "DeepSpeedZeroStrategy",
    "FSDP2Strategy",
    "check_strategy",
    "check_strategy_option",
    "full_tensors",
    "gathered",
    "local",
    "local_grads",
    "sum_over_processes",
    "whole_parameter",
]

FSDP1_REMOVED = (
    "under manual optimization Lightning's FSDP1 never runs torch's root post-backward clean-up, so "
    "from the second step on the update is wrong (and saving and clipping by norm fail). Use FSDP2: "
    "--config configs/strategy/fsdp2.yaml (class_path: agon_lightning.strategies.FSDP2Strategy)"
)


class DecoderLayerFSDPStrategy(FSDPStrategy):
    """Removed (FSDP1 does not compute the right step here); the name stays to say so and point at FSDP2."""

    def __init__(self, layer_names: list[str] | None = None, **kwargs: Any) -> None:
        raise UsageError(
            f"agon_lightning.strategies.DecoderLayerFSDPStrategy (configs/strategy/fsdp.yaml) was removed: {FSDP1_REMOVED}"
        )


def check_strategy(strategy: Any) -> None:
    """Refuse the Lightning strategies that would train the adapters wrongly, naming ours.

    Raises:
        UsageError: Lightning's ``FSDPStrategy`` (FSDP1), or its ``DeepSpeedStrategy`` at stage 3
            (built inside ``zero.Init``, which loses the adapters' init).
    """
    from lightning.pytorch.strategies import DeepSpeedStrategy

    if isinstance(strategy, FSDPStrategy):
        raise UsageError(f"Lightning's FSDPStrategy (FSDP1) is not supported: {FSDP1_REMOVED}")
    if (
        isinstance(strategy, DeepSpeedStrategy)
        and not isinstance(strategy, DeepSpeedZeroStrategy)
        and strategy.zero_stage_3
    ):
        raise UsageError(
            "Lightning's DeepSpeedStrategy at stage 3 builds the model inside deepspeed.zero.Init, where the "
            "adapters' init (alpha's zero lora_B, beta's seeded noise) writes into empty shards; use "
            "agon_lightning.strategies.DeepSpeedZeroStrategy (configs/strategy/deepspeed_zero3.yaml)"
        )


def check_snapshot_strategy(strategy: Any) -> None:
    """Refuse a sharding strategy where adapter snapshots are copied whole into a slot (``self`` KL reference, league).

    Raises:
        UsageError: FSDP2 or DeepSpeed: each process holds a shard of every adapter, and snapshots
            of shards are not implemented.
    """
    from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, SingleDeviceStrategy

    plain = isinstance(strategy, (SingleDeviceStrategy, DDPStrategy)) and not isinstance(
        strategy, DeepSpeedStrategy
    )
    if not plain:
        raise UsageError(
            f"model.kl's 'self' reference and model.league keep whole copies of each adapter's past versions, "
            f"which {type(strategy).__name__} shards; use one device or DDP (the adapters are small: DDP holds "
            f"them whole), or leave both off (model.kl's references {BASE!r} and 'rival' keep no copy)"
        )


def check_strategy_option(value: Any) -> None:
    """Refuse a removed or wrong strategy as the command line or a config names it, before anything loads.

    Raises:
        UsageError: ``agon_lightning.strategies.DecoderLayerFSDPStrategy`` (removed), Lightning's
            ``FSDPStrategy`` or ``"fsdp"`` (FSDP1).
    """
    name = value if isinstance(value, str) else getattr(value, "class_path", None)
    if name is None and isinstance(value, dict):
        name = value.get("class_path")
    if not isinstance(name, str):
        return
    if name.endswith("DecoderLayerFSDPStrategy"):
        raise UsageError(
            f"--trainer.strategy={name} (configs/strategy/fsdp.yaml) was removed: {FSDP1_REMOVED}"
        )
    if name in (
        "fsdp",
        "lightning.pytorch.strategies.FSDPStrategy",
        "lightning.pytorch.strategies.fsdp.FSDPStrategy",
    ):
        raise UsageError(f"--trainer.strategy={name} is FSDP1, not supported: {FSDP1_REMOVED}")
