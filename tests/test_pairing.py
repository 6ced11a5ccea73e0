"""Who answers whom in a step: per-rollout opponents, one shared opponent, one adapter refining itself."""

from __future__ import annotations

import pytest
import torch
from scripted import ScriptedRollout
from test_training_paths import ZeroIsRight

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.formats import ThinkAnswerFormat
from agon_lightning.game.rewards import CorrectnessReward
from agon_lightning.games.agon import exchange_counts
from agon_lightning.games.schedule import opponent_rows
from agon_lightning.training.module import AgonModule, GRPOOptions

N = 4


@pytest.fixture(scope="module")
def problems():
    return ReasoningGymDataModule(train_size=12, val_size=1, batch_size=3).train_problems[:3]


def make_module(model_dir, **kwargs) -> AgonModule:
    module = AgonModule(
        model_name_or_path=str(model_dir), lora=LoraOptions(r=2, target_modules=["q_proj"]),
        grpo=GRPOOptions(num_generations=N), rollout=ScriptedRollout(), verifier=ZeroIsRight(),
        validate_at_start=False, **kwargs,
    )  # fmt: skip
    module.configure_model()
    return module


def phi(texts):
    return torch.tensor([ThinkAnswerFormat().score(t) for t in texts])


def test_per_rollout_pairs_challenge_i_with_draft_i():
    assert opponent_rows(2, 3).tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="'everyone'"):
        opponent_rows(2, 3, "everyone")


def test_a_shared_opponent_is_one_draft_per_group_read_and_graded_by_every_challenge(
    tiny_model_dir, problems
):
    module = make_module(tiny_model_dir, pairing="shared")
    record = module.play(problems)
    first = [g * N for g in range(len(problems)) for _ in range(N)]
    assert record.opponents.tolist() == first
    grouped = [p for p in problems for _ in range(N)]
    d = record.draft.rollouts
    summaries = [module.summarizer.summarize(t, p, bool(c)) for t, p, c in zip(d.texts, grouped, d.truncated)]
    assert record.summaries == [summaries[i] for i in first]
    for g in range(len(problems)):  # every challenge of a problem read the same prompt
        assert len(set(record.summaries[g * N : (g + 1) * N])) == 1
    a, b = record.draft.correct[first], record.challenge.correct
    expected = 2 * b + b * (1 - a) + 0.5 * phi(record.challenge.rollouts.texts)
    torch.testing.assert_close(record.challenge.rewards, expected)
    bonus_miss = (1 - a).view(-1, N)
    assert (bonus_miss == bonus_miss[:, :1]).all()  # the bonus's 1 − c(a) is group-constant
    converted, wrong = exchange_counts(record)[:2]
    assert wrong == (a == 0).sum() and converted == ((a == 0) & (b == 1)).sum()
    # Drafts keep their own rewards: N per problem, graded on themselves.
    d = record.draft
    torch.testing.assert_close(d.rewards, 2 * d.correct + 0.5 * phi(d.rollouts.texts))


def test_shared_pairing_needs_a_challenger():
    with pytest.raises(ValueError, match="pairing='shared' .* game='grpo' has no challenger"):
        AgonModule(game="grpo", pairing="shared")


def test_self_refinement_is_one_adapter_in_both_stages_without_a_bonus(tiny_model_dir, problems):
    module = make_module(tiny_model_dir, schedule="self_play", reward=CorrectnessReward())
    assert module.adapter_names == ("alpha",) and module.evaluator.deployed_key == "cascade_aa"
    for step in range(2):
        module.agon_step = step
        record = module.play(problems)
        assert (record.draft.adapter, record.challenge.adapter) == ("alpha", "alpha")
        c = record.challenge
        torch.testing.assert_close(c.rewards, 2 * c.correct + 0.5 * phi(c.rollouts.texts))
        assert len(c.rollouts) == len(record.draft.rollouts) == N * len(problems)  # 2N rollouts a problem
