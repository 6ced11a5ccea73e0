"""Linear warm-up, then linear decay: the Agon paper's learning-rate schedule.

LightningCLI builds ``model.lr_scheduler`` around the optimizer, and the module steps it once
per optimizer step: once per batch, or μ times under ``grpo.num_iterations`` (μ > 1). Lightning's
``global_step`` and ``trainer.max_steps`` count the same optimizer steps, so ``total_steps``
is in those units too: set it to ``trainer.max_steps`` and the decay ends with the run, whatever
μ is. A skipped (non-finite) step is no optimizer step and does not advance the schedule.
"""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


def warmup_linear_decay(step: int, total_steps: int, warmup_steps: int, final_fraction: float = 0.0) -> float:
    """The learning-rate factor for optimizer step ``step`` (0-based).

    Rises linearly to 1 over the first ``warmup_steps`` steps (the first step already at
    ``1 / warmup_steps``, not 0: no step is wasted), then falls linearly to ``final_fraction``
    at ``total_steps``, and stays there.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    left = max(total_steps - step, 0) / max(total_steps - warmup_steps, 1)
    return final_fraction + (1.0 - final_fraction) * left


class WarmupLinearDecay(LRScheduler):
    """Linear warm-up over ``warmup_fraction`` of the run, then linear decay to the end.

    Args:
        optimizer: The optimizer (LightningCLI passes it).
        total_steps: Optimizer steps in the run: ``trainer.max_steps``.
        warmup_fraction: Share of ``total_steps`` spent warming up (0.1: the paper's 10%).
        final_fraction: Learning rate at the end, as a fraction of the peak (0: decay to 0).
        last_epoch: Index of the last step taken (``-1``: a fresh run; resuming restores it).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        warmup_fraction: float = 0.1,
        final_fraction: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1 (trainer.max_steps), got {total_steps}")
        if not 0.0 <= warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
        if not 0.0 <= final_fraction <= 1.0:
            raise ValueError(f"final_fraction must be in [0, 1], got {final_fraction}")
        self.total_steps = total_steps
        self.warmup_steps = round(warmup_fraction * total_steps)
        self.final_fraction = final_fraction
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        factor = warmup_linear_decay(
            self.last_epoch, self.total_steps, self.warmup_steps, self.final_fraction
        )
        return [base * factor for base in self.base_lrs]
