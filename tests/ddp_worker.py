"""Run 2 Agon steps with N CPU processes (DDP over gloo) and save each rank's adapters.

Launched by tests/test_ddp.py as ``python tests/ddp_worker.py DEVICES OUT_DIR MODEL_DIR``;
Lightning's DDP launcher re-runs this same command for the other ranks. Rollouts are
scripted (deterministic text per prompt and sample) so a 1-process run over the same global
batch sees the same completions and must reach the same weights.
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import lightning as L
import torch

from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.module import AgonModule, GRPOOptions
from agon_lightning.policy import LoraOptions
from agon_lightning.rollout import Rollout, RolloutBatch, completion_mask
from agon_lightning.verifiers.exact import ExactMatchVerifier

GLOBAL_BATCH = 4


class ScriptedRollout(Rollout):
    """Deterministic completions ``<answer>k</answer>`` with k from a hash of prompt and sample."""

    max_new_tokens = 16
    temperature = 1.0

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False):
        device = next(model.parameters()).device
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        ids = enc["input_ids"].repeat_interleave(num_samples, 0).to(device)
        attn = enc["attention_mask"].repeat_interleave(num_samples, 0).to(device)
        texts = [
            f"<answer>{zlib.crc32(f'{p}|{j}'.encode()) % 3}</answer>"
            for p in prompts
            for j in range(num_samples)
        ]
        rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
        width = max(map(len, rows))
        comp = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
        for i, r in enumerate(rows):
            comp[i, : len(r)] = torch.tensor(r)
        mask, truncated = completion_mask(comp, [tokenizer.eos_token_id])
        return RolloutBatch(ids, attn, comp.to(device), mask.to(device), texts, mask.sum(1), truncated)


def main(devices: int, out: Path, model_dir: str) -> None:
    L.seed_everything(0)
    module = AgonModule(
        model_name_or_path=model_dir,
        lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=GRPOOptions(num_generations=4, loss_aggregation="seq_mean"),
        rollout=ScriptedRollout(),
        verifier=ExactMatchVerifier(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
        validate_at_start=False,
    )
    # A gold answer of "0" for every problem: rewards then vary inside each group.
    data = ReasoningGymDataModule(train_size=GLOBAL_BATCH, val_size=1, batch_size=GLOBAL_BATCH // devices)
    data.setup()
    for p in data.train_problems:
        p.answer = "0"
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto", max_epochs=2,
        limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(out),
    )  # fmt: skip
    trainer.fit(module, data)
    weights = {n: p.detach().clone() for n, p in module.policy.named_parameters() if "lora_" in n}
    torch.save({"weights": weights, "steps": module.agon_step}, out / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
