"""A hard held-out split is evaluated beside the main one, and every problem's outcome is kept."""

from __future__ import annotations

import pytest
import torch
from scripted import ScriptedRollout
from test_training_paths import ZeroIsRight

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.training.module import AgonModule, GRPOOptions

MAIN = {"chain_sum": {"min_terms": 3, "max_terms": 3}}
HARD = {"chain_sum": {"min_terms": 5, "max_terms": 5}}


def test_hard_problems_are_tagged_and_kept_out_of_training():
    dm = ReasoningGymDataModule(tasks=MAIN, train_size=30, val_size=4, hard_tasks=HARD, hard_size=3)
    splits = [p.metadata.get("split", "") for p in dm.val_problems]
    assert splits == [""] * 4 + ["hard"] * 3
    assert all(p.question.count("+") + p.question.count("-") == 4 for p in dm.val_problems[4:])
    assert not {p.question for p in dm.val_problems} & {p.question for p in dm.train_problems}
    with pytest.raises(ValueError, match="hard_seed must differ"):
        ReasoningGymDataModule(tasks=MAIN, hard_tasks=HARD, hard_seed=1)


def test_validation_reports_each_split_from_its_own_problems(tiny_model_dir):
    dm = ReasoningGymDataModule(
        tasks=MAIN, train_size=30, val_size=4, hard_tasks=HARD, hard_size=3, val_batch_size=5
    )
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=2, target_modules=["q_proj"]),
        grpo=GRPOOptions(num_generations=2), rollout=ScriptedRollout(), verifier=ZeroIsRight(),
    )  # fmt: skip
    module.configure_model()
    metrics = module.evaluator.run(module, dm.val_dataloader())  # batches of 5 mix the splits
    outcomes = module.evaluator.last_outcomes
    assert [o["split"] for o in outcomes] == [""] * 4 + ["hard"] * 3
    for split, prefix, n in (("", "val/", 4), ("hard", "val/hard/", 3)):
        rows = [o for o in outcomes if o["split"] == split]
        for key in ("base", "alpha", "beta", "cascade_ab", "cascade_ba"):
            expected = sum(o[key] for o in rows) / n
            assert metrics[f"{prefix}{key}/pass@1"] == pytest.approx(expected), (prefix, key)
            lengths = torch.tensor([o[f"{key}/length"] for o in rows], dtype=torch.float32)
            assert metrics[f"{prefix}{key}/length"] == pytest.approx(float(lengths.mean()))
        assert metrics[f"{prefix}deployed/pass@1"] == metrics[f"{prefix}cascade_ab/pass@1"]
    assert module.evaluator.outcomes == []  # reset for the next evaluation
