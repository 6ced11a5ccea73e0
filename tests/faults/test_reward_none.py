"""A reward function that returns ``None`` for every completion is named once and shows in the metrics.

``None`` is TRL's "does not apply": it pays nothing, and where the function decides c every
completion counts as wrong. A function that never applies would train at c = 0 in silence, and
with no value it would have no ``/mean`` either: it would vanish from the metrics. So a batch of
``None`` from a function is a warning naming it (once per function), and every step logs its
``reward/<name>/none_share``.
"""

from __future__ import annotations

import csv
import logging

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.rewards import GradedReward
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.training.step_metrics import function_counts, function_metrics, function_stats
from agon_lightning.verifiers.reward_function import RewardFunctionVerifier

LOGGER = "agon_lightning.verifiers.reward_function"
PROBLEMS = [Problem("1+1", "2"), Problem("2+2", "4"), Problem("3+3", "6")]


def never_applies(completions, **kwargs):
    return [None] * len(completions)


def applies_to_the_first(completions, **kwargs):
    return [1.0] + [None] * (len(completions) - 1)


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_a_function_that_never_applies_is_named_once(caplog):
    verifier = RewardFunctionVerifier([applies_to_the_first, never_applies])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            verdicts = verifier.verify_batch(["a", "b", "c"], PROBLEMS)
    (message,) = warnings_of(caplog)  # once, and not for the function that applies to one row
    assert f"reward function {__name__}.never_applies returned None" in message
    assert "for all 3 completions of a batch" in message and "reward/never_applies/none_share" in message
    assert function_metrics("reward/", verdicts) == {
        "reward/applies_to_the_first/none_share": 2 / 3,
        "reward/applies_to_the_first/mean": 1.0,
        "reward/applies_to_the_first/std": 0.0,
        "reward/never_applies/none_share": 1.0,  # and no mean: there is no value
    }


def test_the_function_that_decides_c_is_said_to_make_every_completion_wrong(caplog):
    verifier = RewardFunctionVerifier(never_applies)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not any(v.correct for v in verifier.verify_batch(["a", "b"], PROBLEMS[:2]))
    (message,) = warnings_of(caplog)
    assert "it decides c (correct_if), so every one counted as wrong" in message


def test_values_summed_over_processes_give_the_pooled_shares_means_and_stds():
    names = ["f"]
    one = [Verdict(True, rewards={"f": x}) for x in (0.0, None, 1.0)]
    other = [Verdict(True, rewards={"f": x}) for x in (None, None, 2.0)]
    pooled = function_stats("reward/", names, function_counts(one, names) + function_counts(other, names))
    assert pooled == pytest.approx(function_metrics("reward/", one + other))
    assert pooled == pytest.approx({"reward/f/none_share": 0.5, "reward/f/mean": 1.0, "reward/f/std": 1.0})


def test_every_step_logs_the_share_of_none_and_no_mean_without_a_value(tiny_model_dir, tmp_path, caplog):
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir),
        lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=GRPOOptions(num_generations=2),
        rollout=HFRollout(max_new_tokens=4),
        verifier=RewardFunctionVerifier([applies_to_the_first, never_applies]),
        reward=GradedReward(),  # several functions: their weighted sum is paid
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        validate_at_start=False,
    )
    data = ReasoningGymDataModule(train_size=4, val_size=2, batch_size=2, val_batch_size=2)
    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=2, limit_val_batches=0, logger=CSVLogger(tmp_path), log_every_n_steps=1,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.fit(module, data)
    assert len(warnings_of(caplog)) == 1  # two steps, two roles: one warning
    (path,) = tmp_path.rglob("metrics.csv")
    rows = list(csv.DictReader(path.open()))
    for prefix in ("reward/", "challenge_reward/"):
        never = [(r["step"], v) for r in rows if (v := r[f"{prefix}never_applies/none_share"])]
        assert never == [("0", "1.0"), ("1", "1.0")], prefix
        assert f"{prefix}never_applies/mean" not in rows[0], "a mean of no value"
        first = [float(v) for r in rows if (v := r[f"{prefix}applies_to_the_first/none_share"])]
        assert len(first) == 2 and all(0 < x < 1 for x in first), prefix
