"""Each shipped variant's training update: a 3-step fit on the tiny model, by the module arguments
its overlay (configs/experiments/) sets, with the scripted rollout and a verifier that needs no
model. Shared by tests/test_variant_updates.py and scripts/adapter_fingerprint.py."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from scripted import ScriptedRollout
from test_training_paths import ZeroIsRight

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.prompts import Prompts
from agon_lightning.training.module import AgonModule, GRPOOptions

#: The overlays whose training differs; eval-only ones (moa_untrained, zero_shot, grpo_self_cascade's
#: deployment) train as `grpo`, and grpo_n differs from it only in N.
NAMES = ("agon", "cooperative", "fixed_roles", "grpo", "self_play", "self_refine", "margin", "tiebreak",
         "no_exchange", "shared_opponent", "other_summary")  # fmt: skip


def variant_arguments(name: str) -> dict:
    """The module arguments the overlay ``name`` sets (those that change training)."""
    from agon_lightning.game.rewards import CompetitiveReward, CorrectnessReward
    from agon_lightning.summarizers.basic import HiddenSummarizer, StripTraceSummarizer
    from agon_lightning.summarizers.other import OtherProblemSummarizer

    hidden = {"summarizer": HiddenSummarizer(), "prompts": Prompts(challenge="{question}{summary}")}
    return {
        "agon": {"game": "agon", "schedule": "rotate"},
        "cooperative": {"reward": CorrectnessReward()},
        "fixed_roles": {"schedule": "fixed"},
        "grpo": {"game": "grpo"},
        "self_play": {"schedule": "self_play"},
        "self_refine": {"schedule": "self_play", "reward": CorrectnessReward()},
        "margin": {"reward": CompetitiveReward(form="margin")},
        "tiebreak": {"reward": CompetitiveReward(length_tiebreak=0.5)},
        "no_exchange": hidden,
        "shared_opponent": {"pairing": "shared", **hidden},
        "other_summary": {"summarizer": OtherProblemSummarizer(summarizer=StripTraceSummarizer())},
    }[name]


def fit_variant(model_dir: Path, name: str, root: Path) -> dict[str, torch.Tensor]:
    """The LoRA tensors after a 3-step fit of variant ``name`` (seeded: the same on every call)."""
    L.seed_everything(0, verbose=False)
    module = AgonModule(
        model_name_or_path=str(model_dir), lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=GRPOOptions(num_generations=4), rollout=ScriptedRollout(max_new_tokens=48), verifier=ZeroIsRight(),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.5), validate_at_start=False, **variant_arguments(name),
    )  # fmt: skip
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=3, limit_val_batches=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(root),
    )  # fmt: skip
    trainer.fit(module, ReasoningGymDataModule(train_size=16, val_size=1, batch_size=2))
    return {k: v.detach().clone() for k, v in module.named_parameters() if "lora_" in k}
