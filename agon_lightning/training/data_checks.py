"""The start-time checks on the data a run reads, before the model loads."""

from __future__ import annotations

from typing import Any

from agon_lightning.adapters.policy import resolve_model_path
from agon_lightning.data.base import ProblemDataModule


def check_problems(module: Any, stage: str) -> None:
    """Prompts that leave no room for the completion (dropped or refused, ``data.too_long``), then the
    verifier's checks (a reward function's column missing, say), for the data ``stage`` reads."""
    data = getattr(module.trainer, "datamodule", None)
    if not isinstance(data, ProblemDataModule):
        return
    data.fit_prompts(
        stage, resolve_model_path(module.model_name_or_path), module.prompts.draft_prompt,
        module.rollout.max_new_tokens, getattr(module.rollout, "max_model_len", None),
    )  # fmt: skip
    if stage == "fit":
        module.verifier.check_problems(data.train_problems, "the training problems")
    if stage in ("fit", "validate", "test"):
        module.verifier.check_problems(data.val_problems, "the held-out problems")
