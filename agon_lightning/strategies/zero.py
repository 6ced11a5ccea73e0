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

import torch
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy


class DeepSpeedZeroStrategy(DeepSpeedStrategy):
    """DeepSpeed ZeRO (stage 2 or 3) that runs on CPU processes as well as GPUs.

    Args:
        stage: ``2``: optimizer state and gradients partitioned, weights replicated. ``3``: the
            weights partitioned too (the model is built whole first, so the adapters' init is
            exactly as configured).
        exclude_frozen_parameters: Leave the frozen base out of checkpoints.
        param_persistence_threshold: ZeRO-3 keeps parameters of at most this many elements
            whole on every rank (DeepSpeed's ``stage3_param_persistence_threshold``; ``None``:
            DeepSpeed's default, 1e5, which keeps LoRA factors and norms whole). ``0`` partitions all.
        **kwargs: Passed to :class:`~lightning.pytorch.strategies.DeepSpeedStrategy`.
    """

    def __init__(
        self,
        stage: int = 2,
        exclude_frozen_parameters: bool = True,
        param_persistence_threshold: int | None = None,
        **kwargs: Any,
    ) -> None:
        if stage not in (2, 3):
            raise ValueError(f"stage must be 2 or 3, got {stage!r} (stage 1: use 2; no ZeRO: use ddp)")
        if param_persistence_threshold is not None and (stage != 3 or param_persistence_threshold < 0):
            raise ValueError(
                f"param_persistence_threshold={param_persistence_threshold} needs stage 3 and a value >= 0"
            )
        super().__init__(stage=stage, exclude_frozen_parameters=exclude_frozen_parameters, **kwargs)
        zero = self.config.setdefault("zero_optimization", {})
        if stage == 3:
            # No prefetching: a rollout gathers the whole model at once (agon_lightning.strategies.gathered),
            # and a parameter still in flight from a prefetch cannot be gathered or released by it.
            zero.setdefault("stage3_prefetch_bucket_size", 0)
        if param_persistence_threshold is not None:
            zero["stage3_param_persistence_threshold"] = param_persistence_threshold

    def setup(self, trainer: Any) -> None:
        if self.precision_plugin.precision != "32-true":
            return super().setup(trainer)
        # Lightning's DeepSpeed precision casts the whole module to float32 at "32-true", the
        # default: a bfloat16 base (model.dtype) would double in size and train another policy
        # than under DDP or FSDP2. The module keeps the dtypes it was built with (the adapters
        # are float32 either way); "bf16-true" and the mixed precisions still convert as usual.
        plugin = self.precision_plugin
        plugin.convert_module = lambda module: module
        try:
            super().setup(trainer)
        finally:
            del plugin.convert_module

    def setup_environment(self) -> None:
        # DeepSpeedStrategy's own check refuses any accelerator but CUDA; DeepSpeed does not.
        DDPStrategy.setup_environment(self)

    def setup_distributed(self) -> None:
        if self.root_device.type != "cpu":
            return super().setup_distributed()
        # DeepSpeedStrategy's, less its check of CUDA device indices (a CPU device has none).
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()

    def init_deepspeed(self) -> None:
        if self.root_device.type != "cpu":
            return super().init_deepspeed()
        # deepspeed.initialize takes the process's device from root_device.index, which a CPU
        # device lacks (None fails its check); cpu:LOCAL_RANK is the same CPU, with an index.
        devices = self.parallel_devices
        self.parallel_devices = [torch.device("cpu", i) for i in range(len(devices))]
        try:
            super().init_deepspeed()
        finally:
            self.parallel_devices = devices

    def save_checkpoint(self, checkpoint: dict, filepath: Any, storage_options: Any | None = None) -> None:
        if not self.exclude_frozen_parameters:
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        # DeepSpeed leaves frozen parameters out by their first name only: a tied weight's second
        # name (lm_head.weight, the embedding matrix) would still be in every checkpoint.
        module = self.deepspeed_engine.module
        frozen = {n for n, p in module.named_parameters(remove_duplicate=False) if not p.requires_grad}

        def drop_frozen(mod: Any, state: dict, prefix: str, meta: Any) -> None:
            for name in frozen:
                state.pop(prefix + name, None)

        handle = module.register_state_dict_post_hook(drop_frozen)
        try:
            super().save_checkpoint(checkpoint, filepath, storage_options)
        finally:
            handle.remove()

    @contextlib.contextmanager
    def model_sharded_context(self) -> Iterator[None]:
        """No ``zero.Init``: the model is built whole, so every init runs on whole tensors."""
        self._init_config_if_needed()
        yield
