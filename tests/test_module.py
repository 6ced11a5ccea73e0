"""The game end to end on a tiny in-process model: who updates, who drafts, what is logged."""

import lightning as L
import pytest
import torch

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.rewards import RoleRewards
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier


def make_module(model_dir, **kwargs):
    grpo = kwargs.pop("grpo", GRPOOptions(num_generations=2))
    return AgonModule(
        model_name_or_path=str(model_dir),
        lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=grpo,
        rollout=HFRollout(max_new_tokens=6),
        verifier=ReasoningGymVerifier(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
        validate_at_start=False,
        **kwargs,
    )


class RankReward:
    """Rewards by position in the batch, so every step has a learning signal."""

    def __call__(self, outcomes):
        n = len(outcomes.draft.correct)
        return RoleRewards(draft=torch.arange(n).float(), challenge=torch.arange(n).flip(0).float())


def fit(module, steps, tmp_path):
    dm = ReasoningGymDataModule(train_size=20, val_size=2, batch_size=2, val_batch_size=2)
    trainer = L.Trainer(
        max_steps=-1, max_epochs=1, limit_train_batches=steps, limit_val_batches=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, accelerator="cpu",
    )  # fmt: skip
    seen = []

    class Spy(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            rec = pl_module.last_record
            seen.append((rec.draft.adapter, rec.challenge.adapter if rec.challenge else None))

    trainer.callbacks.append(Spy())
    trainer.fit(module, dm)
    return seen


def snapshot(module):
    return {n: p.detach().clone() for n, p in module.policy.named_parameters()}


def changed(before, module, key):
    return [n for n, p in module.policy.named_parameters() if key(n) and not torch.equal(before[n], p)]


def test_one_step_updates_both_adapters_never_the_base(tiny_model_dir, tmp_path):
    module = make_module(tiny_model_dir)
    module.reward = RankReward()  # a learning signal whatever the untrained model writes
    module.configure_model()
    before = snapshot(module)
    seen = fit(module, 1, tmp_path)
    assert seen == [("alpha", "beta")]
    assert changed(before, module, lambda n: ".alpha." in n), "drafter (alpha) did not change"
    assert changed(before, module, lambda n: ".beta." in n), "challenger (beta) did not change"
    assert not changed(before, module, lambda n: "lora_" not in n), "the frozen base changed"


def test_beta_starts_with_gaussian_b_and_alpha_with_zero_b(tiny_model_dir):
    module = make_module(tiny_model_dir)
    module.configure_model()
    params = dict(module.policy.named_parameters())
    alpha_b = [p for n, p in params.items() if ".lora_B.alpha." in n]
    beta_b = [p for n, p in params.items() if ".lora_B.beta." in n]
    assert all(torch.count_nonzero(p) == 0 for p in alpha_b)
    std = torch.cat([p.flatten() for p in beta_b]).std().item()
    assert 0.5e-3 < std < 2e-3


@pytest.mark.parametrize("schedule,expected", [
    ("rotate", [("alpha", "beta"), ("beta", "alpha")]),
    ("fixed", [("alpha", "beta"), ("alpha", "beta")]),
    ("self_play", [("alpha", "alpha"), ("alpha", "alpha")]),
])  # fmt: skip
def test_role_schedule_in_training(tiny_model_dir, tmp_path, schedule, expected):
    module = make_module(tiny_model_dir, schedule=schedule)
    assert fit(module, 2, tmp_path) == expected
    assert module.agon_step == 2


def test_grpo_game_trains_one_adapter(tiny_model_dir, tmp_path):
    module = make_module(tiny_model_dir, game="grpo", grpo=GRPOOptions(num_generations=4))
    assert fit(module, 1, tmp_path) == [("alpha", None)]
    assert module.adapter_names == ("alpha",)


def test_kl_and_multiple_iterations_and_micro_batches_run(tiny_model_dir, tmp_path):
    opts = GRPOOptions(
        num_generations=2, kl_beta=0.1, num_iterations=2, micro_batch_size=2, mask_truncated=True
    )
    module = make_module(tiny_model_dir, grpo=opts)
    fit(module, 1, tmp_path)
    assert module.agon_step == 1


def test_micro_batching_gives_the_full_batch_gradient(tiny_model_dir, tmp_path):
    grads = []
    for mb in (0, 1):
        torch.manual_seed(0)
        module = make_module(tiny_model_dir, grpo=GRPOOptions(num_generations=2, micro_batch_size=mb))
        module.reward = RankReward()
        module.configure_model()
        captured = {}
        module.optimizer_factory = lambda params: torch.optim.SGD(params, lr=0.0)

        class Grab(L.Callback):
            def on_before_optimizer_step(self, trainer, pl_module, optimizer, captured=captured):
                captured.update(
                    {n: p.grad.clone() for n, p in pl_module.policy.named_parameters() if p.grad is not None}
                )

        dm = ReasoningGymDataModule(train_size=20, val_size=2, batch_size=2)
        L.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False, callbacks=[Grab()],
                  default_root_dir=tmp_path).fit(module, dm)  # fmt: skip
        grads.append(captured)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    assert any(g.abs().sum() > 0 for g in grads[0].values())
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name


def test_bad_options_fail_at_construction():
    with pytest.raises(ValueError, match="num_generations.*1"):
        GRPOOptions(num_generations=1)
    with pytest.raises(ValueError, match="'sum'"):
        GRPOOptions(loss_aggregation="sum")
    with pytest.raises(ValueError, match="'sometimes'"):
        AgonModule(schedule="sometimes")
    with pytest.raises(ValueError, match="lora.r"):
        LoraOptions(r=0)
