"""The model at the start of a fit, in one line: what trains and what stays frozen.

Lightning's summary table measures FLOPs by running ``example_input_array`` through the module,
which the game has none of (it samples, then scores), so it printed ``FLOPs 0`` per layer and
``Total FLOPs: 0``: a number nobody can act on. For two adapters on a frozen base the useful
figures are the adapters' share and the model's size; this prints those, on rank zero, once.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.utilities.model_summary import get_human_readable_count


class AdapterSummary(ModelSummary):
    """``model: 1.4 M parameters, 360 K of them trainable (25.7%: the adapters), 5.6 MB``
    (``all of them trainable`` where nothing is frozen, as in ``agon sft``)."""

    def __init__(self) -> None:
        super().__init__(max_depth=1)

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int = 0,
        **summarize_kwargs: Any,
    ) -> None:
        share = trainable_parameters / total_parameters if total_parameters else 0.0
        trainable = (
            "all of them trainable"  # agon sft trains the whole model
            if trainable_parameters == total_parameters
            else f"{get_human_readable_count(int(trainable_parameters))} of them trainable ({share:.1%}: the adapters)"
        )
        print(
            f"model: {get_human_readable_count(int(total_parameters))} parameters, {trainable}, {model_size:.1f} MB",
            flush=True,
        )
