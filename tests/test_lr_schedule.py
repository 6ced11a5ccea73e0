"""The paper's learning-rate schedule: values by hand, and its step count in a real run."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from test_module import make_module

from agon_lightning.training.lr_schedule import WarmupLinearDecay, warmup_linear_decay
from agon_lightning.training.module import GRPOOptions


@pytest.mark.parametrize(
    "step, total, warmup, final, factor",
    [
        (0, 10, 2, 0.0, 0.5),  # the first step already learns
        (1, 10, 2, 0.0, 1.0),  # the peak at the end of the warm-up
        (2, 10, 2, 0.0, 1.0),  # decay starts from the peak
        (6, 10, 2, 0.0, 0.5),
        (9, 10, 2, 0.0, 0.125),  # the last step of the run
        (10, 10, 2, 0.0, 0.0),
        (25, 10, 2, 0.0, 0.0),  # past the end it stays at the floor
        (6, 10, 2, 0.2, 0.6),
        (0, 10, 0, 0.0, 1.0),  # no warm-up
    ],
)
def test_factor_by_hand(step, total, warmup, final, factor):
    assert warmup_linear_decay(step, total, warmup, final) == pytest.approx(factor)


def test_the_paper_setting_and_bad_values():
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=5e-5)
    scheduler = WarmupLinearDecay(optimizer, total_steps=500, warmup_fraction=0.1)
    assert scheduler.warmup_steps == 50 and optimizer.param_groups[0]["lr"] == pytest.approx(1e-6)
    for _ in range(49):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-5)
    with pytest.raises(ValueError, match="total_steps must be >= 1 .*got 0"):
        WarmupLinearDecay(optimizer, total_steps=0)
    with pytest.raises(ValueError, match="warmup_fraction must be in \\[0, 1\\), got 1.5"):
        WarmupLinearDecay(optimizer, total_steps=10, warmup_fraction=1.5)


def test_it_counts_optimizer_steps_like_max_steps_under_num_iterations(tiny_model_dir, tmp_path):
    """μ = 2 optimizer steps a batch: max_steps=4 is 2 batches, and the schedule ends with them."""
    from agon_lightning.data.reasoning_gym import ReasoningGymDataModule

    module = make_module(
        tiny_model_dir,
        grpo=GRPOOptions(num_generations=2, num_iterations=2),
        lr_scheduler=lambda optimizer: WarmupLinearDecay(optimizer, total_steps=4, warmup_fraction=0.25),
    )
    lrs = []

    class Record(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            lrs.append(optimizer.param_groups[0]["lr"])

    trainer = L.Trainer(
        max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0,
        enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu", callbacks=[Record()],
    )  # fmt: skip
    trainer.fit(module, ReasoningGymDataModule(train_size=20, val_size=2, batch_size=2, val_batch_size=2))
    assert trainer.global_step == 4 and module.agon_step == 2
    assert lrs == pytest.approx([0.5 * f for f in (1.0, 1.0, 2 / 3, 1 / 3)])  # make_module's SGD has lr 0.5
    assert module.lr_schedulers().last_epoch == 4
