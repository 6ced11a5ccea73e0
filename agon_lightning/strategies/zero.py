"""DeepSpeed ZeRO-2 and ZeRO-3 through Lightning's ``DeepSpeedStrategy``, on GPUs and on CPUs.

Lightning's strategy refuses anything but CUDA; DeepSpeed itself runs on a CPU (its CPU
accelerator, gloo), so this one only drops that check: the same config trains on a laptop's
processes and on GPUs. (At start DeepSpeed compiles a small op with the C++ compiler, about a
minute the first time, cached after.)

ZeRO-3 and the adapters' init: Lightning builds the model inside ``deepspeed.zero.Init``,
where every parameter is partitioned as it is created, so PEFT's init and ours (``alpha``'s
zero ``lora_B``, ``beta``'s seeded noise) write into empty shards. Here the model is built
whole, exactly as on one device, and ``deepspeed.initialize`` partitions it (from rank 0's
copy): the adapters start exactly as configured, at the cost of one whole model in host
memory per process while it is built.

Checkpoints are DeepSpeed's own folders without the frozen base
(``exclude_frozen_parameters``): the adapters, and each rank's partition of the optimizer
state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy


class DeepSpeedZeroStrategy(DeepSpeedStrategy):
    """DeepSpeed ZeRO (stage 2 or 3) that runs on CPU processes as well as GPUs.

    Args:
        stage: ``2``: optimizer state and gradients partitioned, weights replicated. ``3``: the
            weights partitioned too (the model is built whole first, so the adapters' init is
            exactly as configured).
        exclude_frozen_parameters: Leave the frozen base out of checkpoints.
        **kwargs: Passed to :class:`~lightning.pytorch.strategies.DeepSpeedStrategy`.
    """

    def __init__(self, stage: int = 2, exclude_frozen_parameters: bool = True, **kwargs: Any) -> None:
        if stage not in (2, 3):
            raise ValueError(f"stage must be 2 or 3, got {stage!r} (stage 1: use 2; no ZeRO: use ddp)")
        super().__init__(stage=stage, exclude_frozen_parameters=exclude_frozen_parameters, **kwargs)

    def setup_environment(self) -> None:
        # DeepSpeedStrategy's own check refuses any accelerator but CUDA; DeepSpeed does not.
        DDPStrategy.setup_environment(self)

    @contextlib.contextmanager
    def model_sharded_context(self) -> Iterator[None]:
        """No ``zero.Init``: the model is built whole, so every init runs on whole tensors."""
        self._init_config_if_needed()
        yield
