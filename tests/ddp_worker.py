"""Run 2 Agon steps with N CPU processes under a strategy and save each rank's adapters and games.

Launched by tests/test_ddp.py and tests/test_strategies.py as::

    python tests/ddp_worker.py STRATEGY DEVICES OUT_DIR MODEL_DIR [--resume CKPT] [--format sharded|file]

Lightning's launcher re-runs this same command for the other ranks. ``STRATEGY`` is ``ddp``,
``fsdp2``, ``zero2`` or ``zero3`` (``ddp`` with 1 device: one process). Rollouts are scripted
(deterministic text per prompt and sample) so every strategy and process count sees the same
completions and must reach the same weights. Activation checkpointing, the KL term and
gradient clipping are on: the options whose recomputation, adapter switching and global norm
a strategy must not disturb. A checkpoint is written after every step (``AgonCheckpoint``,
bundles included); ``--resume`` continues from one in this fresh process and records the
adapters and optimizer state it restored.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import lightning as L
import torch
from reference import SGDMomentum
from scripted import ScriptedRollout

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.callbacks import AgonCheckpoint
from agon_lightning.cli.game import release_process_group
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.strategies import DeepSpeedZeroStrategy, FSDP2Strategy, full_tensors, local
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.verifiers.exact import ExactMatchVerifier

GLOBAL_BATCH = 4
STEPS = 2
LORA = LoraOptions(r=2, target_modules=["q_proj", "v_proj"])
GRPO = GRPOOptions(num_generations=4, loss_aggregation="seq_mean", kl_beta=0.05)
SGD = SGDMomentum(lr=0.5, momentum=0.5)
# Small enough that the global norm is clipped at every step (the tiny model's is ~0.1-1).
MAX_GRAD_NORM = 0.05


def strategy(name: str, devices: int, file_format: str) -> object:
    if name == "ddp":
        return "ddp" if devices > 1 else "auto"
    if name == "fsdp2":
        return FSDP2Strategy(save_distributed_checkpoint=file_format == "sharded")
    if name == "zero2":
        return DeepSpeedZeroStrategy(stage=2)
    if name == "zero3":  # every weight partitioned (DeepSpeed keeps all of this tiny model whole by default)
        return DeepSpeedZeroStrategy(stage=3, param_persistence_threshold=0)
    raise ValueError(f"unknown strategy {name!r}")


class Recorder(L.Callback):
    """Each step's adapters before and after (whole, on every rank), the step's games, the grad norm."""

    def __init__(self) -> None:
        self.steps: list[tuple[dict, object, dict]] = []
        self.optimizer: list[dict] = []  # after each step
        self.restored: tuple[dict, dict] | None = None

    def on_train_start(self, trainer, pl_module):
        # After a resume: what the checkpoint held.
        self.restored = (full_tensors(pl_module.policy), optimizer_state(trainer))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._before = full_tensors(pl_module.policy)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps.append((self._before, pl_module.last_record, full_tensors(pl_module.policy)))
        self.optimizer.append(optimizer_state(trainer))


def optimizer_state(trainer: L.Trainer) -> dict:
    """The parameter groups' names and every state tensor (this rank's part under ZeRO and FSDP2)."""
    opt = trainer.strategy.optimizers[0]
    opt = getattr(opt, "optimizer", opt)  # a DeepSpeed ZeRO optimizer wraps the torch one
    tensors = [local(v).clone() for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]
    return {"groups": [g.get("name") for g in opt.param_groups], "state": tensors}


def run_steps(
    name: str,
    devices: int,
    out: Path,
    model_dir: str,
    resume: str | None = None,
    file_format: str = "sharded",
    checkpointing: bool = True,
    dtype: str = "float32",
) -> dict:
    """One 2-step ``fit`` under strategy ``name``; saves and returns this rank's record (``out/rankR.pt``).

    Later calls in the same processes join the process group the first one started.
    """  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    L.seed_everything(0)
    module = AgonModule(
        model_name_or_path=model_dir, dtype=dtype, lora=LORA, grpo=GRPO, rollout=ScriptedRollout(max_new_tokens=16),
        verifier=ExactMatchVerifier(), optimizer=SGD.factory, max_grad_norm=MAX_GRAD_NORM,
        gradient_checkpointing=checkpointing, validate_at_start=True,
    )  # fmt: skip
    # One global batch per epoch, so every process count sees the same problems each step (samplers
    # shuffle differently); a gold answer of "0" for every problem: rewards then vary inside each group.
    data = ReasoningGymDataModule(
        train_size=GLOBAL_BATCH, val_size=2, batch_size=GLOBAL_BATCH // devices, val_batch_size=1
    )
    data.setup()
    for p in data.train_problems:
        p.answer = "0"
    recorder = Recorder()
    # Named by epoch (one step each): the module logs a "step" metric at validation, which a
    # {step} in the name would read instead of the global step.
    checkpoints = AgonCheckpoint(dirpath=str(out / "checkpoints"), every_n_train_steps=1, monitor=None,
                                 save_top_k=-1, filename="epoch-{epoch}")  # fmt: skip
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy(name, devices, file_format),
        max_epochs=STEPS, limit_val_batches=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(out), callbacks=[recorder, checkpoints],
    )  # fmt: skip
    trainer.fit(module, data, ckpt_path=resume)
    record = {
        "weights": full_tensors(module.policy),
        "steps": module.agon_step,
        "recorded": recorder.steps,
        "restored": recorder.restored,
        "optimizer": recorder.optimizer,
        "history": module.evaluator.history,
        "checkpoints": sorted(p.name for p in (out / "checkpoints").iterdir()),
    }
    torch.save(record, out / f"rank{trainer.global_rank}.pt")
    return record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("strategy")
    parser.add_argument("devices", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("model_dir")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--format", default="sharded", choices=["sharded", "file"])
    parser.add_argument("--no-checkpointing", dest="checkpointing", action="store_false")
    parser.add_argument("--dtype", default="float32", help="the base's dtype (the adapters stay float32)")
    args = parser.parse_args()
    run_steps(args.strategy, args.devices, args.out, args.model_dir, args.resume, args.format, args.checkpointing,
              args.dtype)  # fmt: skip
    release_process_group()  # as `agon fit` does: no gloo group left alive at interpreter exit


if __name__ == "__main__":
    main()
