"""What a step must never do: let a NaN reach the adapters, or write/read a checkpoint without an adapter."""

from __future__ import annotations

import json
import subprocess
import sys

import lightning as L
import pytest
import torch
from reference import lora_weights
from scripted import ScriptedRollout
from test_training_paths import CASES, ZeroIsRight, case_id

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.callbacks import AgonCheckpoint
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.rewards import CompetitiveReward
from agon_lightning.games.agon import exchange_counts, exchange_rates
from agon_lightning.training.module import AgonModule, GRPOOptions

LORA = LoraOptions(r=2, target_modules=["q_proj", "v_proj"])


class NaNOnSteps:
    """The competitive reward, with NaN drafter rewards on the chosen steps (counted from 0)."""

    def __init__(self, steps: set[int] | None) -> None:
        self.steps, self.calls = steps, 0
        self.inner = CompetitiveReward()

    def __call__(self, *args):
        rewards = self.inner(*args)
        if self.steps is None or self.calls in self.steps:
            rewards.draft = torch.full_like(rewards.draft, float("nan"))
        self.calls += 1
        return rewards


def make_module(model_dir, **kwargs) -> AgonModule:
    return AgonModule(
        model_name_or_path=str(model_dir), lora=LORA, grpo=kwargs.pop("grpo", GRPOOptions(num_generations=4)),
        rollout=ScriptedRollout(max_new_tokens=20), verifier=ZeroIsRight(),
        optimizer=kwargs.pop("optimizer", lambda p: torch.optim.SGD(p, lr=0.5)), validate_at_start=False, **kwargs,
    )  # fmt: skip


def fit(module, steps, root, callbacks=()):
    snapshots = []

    class Snap(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            snapshots.append(lora_weights(pl_module.policy))

    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=steps, limit_val_batches=0, logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(root),
        enable_checkpointing=bool(callbacks), callbacks=[Snap(), *callbacks],
    )  # fmt: skip
    data = ReasoningGymDataModule(train_size=16, val_size=1, batch_size=2)
    try:
        trainer.fit(module, data)
    finally:
        snapshots.append(lora_weights(module.policy))
    return trainer, snapshots


def same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_a_nan_step_is_skipped_counted_and_named(tiny_model_dir, tmp_path):
    module = make_module(tiny_model_dir)
    module.reward = NaNOnSteps({1})
    with pytest.warns(UserWarning, match=r"step 1: non-finite loss or gradient in the drafter \(beta"):
        _, snaps = fit(module, 3, tmp_path)
    assert module.skipped_steps == 1 and module.skips_in_a_row == 0
    assert not same(snaps[0], snaps[1]), "step 0 should have updated"
    assert same(snaps[1], snaps[2]), "the NaN step reached the adapters"
    assert not same(snaps[2], snaps[3]), "training did not go on after the skipped step"
    assert all(torch.isfinite(w).all() for w in snaps[3].values())


def test_nan_steps_in_a_row_stop_training_with_the_last_good_checkpoint(tiny_model_dir, tmp_path):
    module = make_module(tiny_model_dir, max_consecutive_skips=2)
    module.reward = NaNOnSteps({1, 2, 3, 4})
    ckpt = AgonCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=1, monitor=None, bundles=False)
    with (
        pytest.warns(UserWarning, match="non-finite"),
        pytest.raises(FloatingPointError, match="2 skipped steps in a row"),
    ):
        fit(module, 5, tmp_path, [ckpt])
    saved = torch.load(tmp_path / "ckpt/last.ckpt", weights_only=False)
    assert saved["agon"]["step"] == 1  # the good step 0 was saved; nothing after it
    now = {f"policy.{k}": v for k, v in lora_weights(module.policy).items()}
    assert now.keys() == saved["state_dict"].keys()
    assert all(torch.equal(now[k], saved["state_dict"][k]) for k in now), (
        "checkpoint != adapters of the good step"
    )


def test_exchange_rates_are_left_out_where_undefined():
    assert exchange_rates(torch.tensor([1.0, 2.0, 0.0, 0.0])) == {"train/conversion_rate": 0.5}
    assert exchange_rates(torch.tensor([0.0, 0.0, 1.0, 4.0])) == {"train/regression_rate": 0.25}
    assert exchange_rates(torch.zeros(4)) == {}


def test_exchange_counts_of_a_step():
    from agon_lightning.game.types import Verdict
    from agon_lightning.games.records import RoleRollout, StepRecord

    def role(correct):
        return RoleRollout("alpha", None, [Verdict(bool(c)) for c in correct], torch.zeros(len(correct)))

    record = StepRecord(0, [], role([0, 0, 1, 1]), challenge=role([1, 0, 0, 1]))
    assert exchange_counts(record).tolist() == [1.0, 2.0, 1.0, 2.0]


# ------------------------------------------------------------------ checkpoints across options
VERIFY = r"""
import json, sys, torch
from agon_lightning.training.module import AgonModule
cases = json.loads(sys.argv[1])
for case in cases:
    module = AgonModule.load_from_checkpoint(case["ckpt"], map_location="cpu", weights_only=False)
    expected = torch.load(case["expected"])
    got = {k: v for k, v in module.state_dict().items() if "lora_" in k}
    assert got.keys() == expected.keys(), (case["id"], sorted(set(got) ^ set(expected))[:3])
    bad = [k for k in got if not torch.equal(got[k], expected[k])]
    assert not bad, (case["id"], bad[:3])
    print(case["id"], len(got), "tensors identical")
"""


def test_checkpoints_round_trip_in_a_fresh_process_for_every_option(tiny_model_dir, tmp_path):
    from reference import SGDMomentum
    from test_training_paths import build_module

    jobs = []
    for case in CASES:
        module = build_module(tiny_model_dir, case, SGDMomentum(lr=0.1, momentum=0.9))
        trainer, _ = fit(module, 1, tmp_path / case_id(case))
        ckpt = tmp_path / f"{case_id(case)}.ckpt"
        trainer.save_checkpoint(ckpt)
        expected = {k: v for k, v in module.state_dict().items() if "lora_" in k}
        torch.save(expected, tmp_path / f"{case_id(case)}.pt")
        saved = torch.load(ckpt, weights_only=False)
        assert saved["state_dict"].keys() == expected.keys(), case_id(case)
        (opt,) = saved["optimizer_states"]
        groups = {g["name"]: g["params"] for g in opt["param_groups"]}
        assert set(groups) == set(module.adapter_names)
        for name, ids in groups.items():  # momentum state for every parameter of every adapter
            assert ids and all("momentum_buffer" in opt["state"][i] for i in ids), (case_id(case), name)
        jobs.append(
            {"id": case_id(case), "ckpt": str(ckpt), "expected": str(tmp_path / f"{case_id(case)}.pt")}
        )
    proc = subprocess.run(
        [sys.executable, "-c", VERIFY, json.dumps(jobs)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("tensors identical") == len(CASES)


def test_a_checkpoint_missing_an_adapter_is_an_error_naming_it(tiny_model_dir, tmp_path):
    module = make_module(tiny_model_dir)
    trainer, _ = fit(module, 1, tmp_path)
    path = tmp_path / "full.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, weights_only=False)
    ckpt["state_dict"] = {k: v for k, v in ckpt["state_dict"].items() if ".beta." not in k}
    torch.save(ckpt, tmp_path / "no_beta.ckpt")
    with pytest.raises(ValueError, match=r"adapter 'beta': \d+ of \d+ tensors missing"):
        AgonModule.load_from_checkpoint(tmp_path / "no_beta.ckpt", weights_only=False)
    grpo = AgonModule(model_name_or_path=str(tiny_model_dir), game="grpo", lora=LORA)
    grpo.configure_model()
    with pytest.raises(ValueError, match="tensors of adapters this run does not have"):
        grpo.on_load_checkpoint(torch.load(path, weights_only=False))
