"""FSDP2 (``fully_shard``) through Lightning's ``ModelParallelStrategy``: our FSDP.

Each decoder layer is one sharded unit (its frozen base weights and both adapters' LoRA
weights together) and the decoder that holds the layers (embeddings, final norm) is the
root. Data parallel over every process: each rank draws its own problems, as under DDP, and
gradients are averaged the same way (a reduce-scatter instead of an all-reduce), so the step
is DDP's. The output head stays whole on every rank: the chunked log-probs multiply by its
weight directly rather than through a module forward, and it is frozen (with tied
embeddings it is the one full copy of the embedding matrix).

Why not FSDP1 (Lightning's ``FSDPStrategy``)? Under manual optimization Lightning runs the
training step inside the root FSDP forward, and torch's root post-backward clean-up never
runs, so from the second step on FSDP1 is in the wrong state: the update differs from DDP's,
``save_checkpoint`` asserts and gradient clipping by norm is refused.

Checkpoints hold what trains (the optimizer's parameters: both adapters) and the optimizer
state, in torch's sharded format (a folder, one file per rank) or as one file
(``save_distributed_checkpoint: false``); the frozen base reloads from ``model_name_or_path``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.strategies.model_parallel import _is_sharded_checkpoint
from lightning.fabric.utilities.load import _METADATA_FILENAME
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn

from .gather import RESHARD_AFTER_FORWARD, fsdp2_modules, whole

LAYER_SUFFIX = "DecoderLayer"


def decoder_layers(model: nn.Module, layer_names: list[str] | None) -> list[nn.Module]:
    """The blocks to shard: modules whose class is named in ``layer_names`` (``None``: ``*DecoderLayer``).

    Raises:
        ValueError: none found; the message lists the layer classes the model has.
    """
    layers = [
        m
        for m in model.modules()
        if (type(m).__name__ in layer_names if layer_names else type(m).__name__.endswith(LAYER_SUFFIX))
    ]
    if not layers:
        found = sorted({type(m).__name__ for m in model.modules() if "Layer" in type(m).__name__})
        wanted = layer_names or [f"*{LAYER_SUFFIX}"]
        raise ValueError(f"no module of class {wanted} in the model to shard; layer classes present: {found}")
    return layers


def shard(
    model: nn.Module, mesh: Any, layer_names: list[str] | None, reshard_after_forward: bool = True
) -> int:
    """``fully_shard`` each decoder layer of ``model`` and, as the root, each module holding them.

    Returns how many modules were sharded (0 when ``model`` is sharded already).
    """
    from torch.distributed.fsdp import fully_shard

    if fsdp2_modules(model):
        return 0
    layers = decoder_layers(model, layer_names)
    holders = {id(m): m for m in model.modules() for c in m.children() if any(c is x for x in layers)}
    # A layer list (nn.ModuleList) holds the layers; the module above it (the decoder) is the root.
    roots = [m for m in model.modules() for c in m.children() if id(c) in holders]
    for layer in layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
        RESHARD_AFTER_FORWARD[layer] = reshard_after_forward
    for root in roots:
        # The root keeps its weights after forward (FSDP2's default for a root).
        fully_shard(root, mesh=mesh, reshard_after_forward=False)
        RESHARD_AFTER_FORWARD[root] = False
    return len(layers) + len(roots)


class FSDP2Strategy(ModelParallelStrategy):
    """FSDP2 on each decoder layer and the decoder, data parallel over all processes (GPU or CPU/gloo).

    Args:
        layer_names: Class names of the blocks to shard (``Qwen3DecoderLayer``, ...), found on
            the loaded model; ``None``: every module whose class name ends in ``DecoderLayer``.
        reshard_after_forward: Free each layer's gathered weights after its forward (``False``
            keeps them until the backward: faster, more memory).
        save_distributed_checkpoint: ``True``: a folder with one file per rank (torch's
            distributed checkpoint); ``False``: one file, assembled on rank 0.
        process_group_backend: ``nccl`` / ``gloo`` (``None``: by device).
        timeout: Collective timeout.
    """

    def __init__(
        self,
        layer_names: list[str] | None = None,
        reshard_after_forward: bool = True,
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
    ) -> None:
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size=1,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        self.layer_names = layer_names
        self.reshard_after_forward = reshard_after_forward

    def setup_environment(self) -> None:
        # Every process is one data-parallel rank (Lightning's "auto" is one per node, for tensor parallelism).
        if self._data_parallel_size == "auto":
            self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()

    def setup(self, trainer: Any) -> None:
        shard(self.model, self.device_mesh["data_parallel"], self.layer_names, self.reshard_after_forward)
        super().setup(trainer)

    # ------------------------------------------------------------------ checkpoints
    def _trained(self) -> list[tuple[str, nn.Parameter]]:
        """The optimizer's parameters by name: what a checkpoint holds (the base is frozen)."""
        ids = {id(p) for opt in self.optimizers for group in opt.param_groups for p in group["params"]}
        return [(n, p) for n, p in self.model.named_parameters() if id(p) in ids]

    def lightning_module_state_dict(self) -> dict[str, Any]:
        """The trained parameters only: sharded (DTensors) or whole on rank 0 (a collective either way)."""
        if self._save_distributed_checkpoint:
            return {n: p.detach() for n, p in self._trained()}
        state = {n: whole(p.detach()).cpu() for n, p in self._trained()}  # every rank gathers
        return state if self.global_rank == 0 else {}

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Load a checkpoint that holds only some of the model (the adapters): what it has, nothing else.

        Lightning's loader asks a sharded checkpoint for every key of the model, so one without
        the frozen base fails (``Missing key … embed_tokens.weight``). The keys it holds are read
        instead; the module checks that they are every adapter's.
        """
        path = Path(self.broadcast(checkpoint_path))
        if not _is_sharded_checkpoint(path):
            return super().load_checkpoint(path, weights_only)
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        saved = set(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)
        params = dict(self.model.named_parameters())
        held = {n: p.detach().clone() for n, p in params.items() if f"state_dict.{n}" in saved}
        if not held:
            raise ValueError(f"{path} holds none of this model's parameters")
        dcp.load({"state_dict": held}, checkpoint_id=path)
        set_model_state_dict(self.model, held, options=StateDictOptions(strict=False))
        for i, optimizer in enumerate(self.optimizers):
            state = {f"optimizer_{i}": get_optimizer_state_dict(self.model, optimizer)}
            dcp.load(state, checkpoint_id=path)
            set_optimizer_state_dict(self.model, optimizer, optim_state_dict=state[f"optimizer_{i}"])
        checkpoint = torch.load(path / _METADATA_FILENAME, weights_only=weights_only)
        checkpoint["state_dict"] = held  # what was loaded, for the module's check of its adapters
        return checkpoint
