"""A shipped game's 3-step fit on the tiny model, with the scripted rollout, and what the loggers got.

Shared by the games' tests (tests/test_game_*.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import Logger
from scripted import ScriptedRollout

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.games.base import Game
from agon_lightning.games.records import StepRecord
from agon_lightning.training.features import Feature
from agon_lightning.training.module import AgonModule, GRPOOptions


class RecordingLogger(Logger):
    """Every metric the loggers were sent, by name: ``{name: {step: value}}``."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: dict[str, dict[int, float]] = {}

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        return None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        for key, value in metrics.items():
            self.metrics.setdefault(key, {})[int(step or 0)] = float(value)


class Plays(Feature):
    """Each step's record, as the game played it (a feature: ``fit_game(..., features=[plays])``)."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def after_play(self, host: Any, record: StepRecord) -> None:
        self.records.append(record)


def lora_weights(module: AgonModule) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.policy.named_parameters() if "lora_" in n}


def changed(before: dict[str, torch.Tensor], module: AgonModule, adapter: str) -> bool:
    """Whether any of ``adapter``'s LoRA tensors moved since ``before``."""
    now = lora_weights(module)
    return any(not torch.equal(before[k], now[k]) for k in before if f".{adapter}." in k)


def fit_game(
    model_dir: Path, game: Game, root: Path, steps: int = 3, rollout: Any = None, **module_args: Any
) -> tuple[AgonModule, L.Trainer, RecordingLogger, dict[str, torch.Tensor]]:
    """``(module, trainer, logger, LoRA tensors before)`` after a ``steps``-step fit of ``game`` (seeded)."""
    L.seed_everything(0, verbose=False)
    module = AgonModule(
        model_name_or_path=str(model_dir), game=game, lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=module_args.pop("grpo", GRPOOptions(num_generations=4)), rollout=rollout or ScriptedRollout(48),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.5), validate_at_start=False, **module_args,
    )  # fmt: skip
    module.configure_model()
    before = lora_weights(module)
    logger = RecordingLogger()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=steps, limit_val_batches=0, logger=logger,
        log_every_n_steps=1, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(root),
    )  # fmt: skip
    trainer.fit(module, ReasoningGymDataModule(train_size=16, val_size=1, batch_size=2))
    return module, trainer, logger, before
