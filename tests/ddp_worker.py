"""Run 2 Agon steps with N CPU processes (DDP over gloo) and save each rank's adapters and games.

Launched by tests/test_ddp.py as ``python tests/ddp_worker.py DEVICES OUT_DIR MODEL_DIR``;
Lightning's DDP launcher re-runs this same command for the other ranks. Rollouts are
scripted (deterministic text per prompt and sample) so a 1-process run over the same global
batch sees the same completions and must reach the same weights. Activation checkpointing and
the KL term are on: the options whose recomputation and adapter switching DDP must not disturb.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
from reference import SGDMomentum
from scripted import ScriptedRollout
from test_training_paths import Recorder

from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.module import AgonModule, GRPOOptions
from agon_lightning.policy import LoraOptions
from agon_lightning.verifiers.exact import ExactMatchVerifier

GLOBAL_BATCH = 4
LORA = LoraOptions(r=2, target_modules=["q_proj", "v_proj"])
GRPO = GRPOOptions(num_generations=4, loss_aggregation="seq_mean", kl_beta=0.05)
SGD = SGDMomentum(lr=0.5, momentum=0.5)


def main(devices: int, out: Path, model_dir: str) -> None:
    L.seed_everything(0)
    module = AgonModule(
        model_name_or_path=model_dir, lora=LORA, grpo=GRPO, rollout=ScriptedRollout(max_new_tokens=16),
        verifier=ExactMatchVerifier(), optimizer=SGD.factory, max_grad_norm=None, gradient_checkpointing=True,
        validate_at_start=False,
    )  # fmt: skip
    # A gold answer of "0" for every problem: rewards then vary inside each group.
    data = ReasoningGymDataModule(train_size=GLOBAL_BATCH, val_size=1, batch_size=GLOBAL_BATCH // devices)
    data.setup()
    for p in data.train_problems:
        p.answer = "0"
    recorder = Recorder()
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto", max_epochs=2,
        limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(out), callbacks=[recorder],
    )  # fmt: skip
    trainer.fit(module, data)
    weights = {n: p.detach().clone() for n, p in module.policy.named_parameters() if "lora_" in n}
    torch.save(
        {"weights": weights, "steps": module.agon_step, "recorded": recorder.steps},
        out / f"rank{trainer.global_rank}.pt",
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
