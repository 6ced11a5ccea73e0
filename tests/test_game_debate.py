"""Debate with a judge: its pay on hand-built answers, 3-step fits on the tiny model, the league, and its deployment."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from scripted import ScriptedRollout, scripted_text
from shipped_game_fits import Plays, changed, fit_game
from test_training_paths import ZeroIsRight

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.prompts import fill
from agon_lightning.games.debate import (
    DEBATER_A,
    DEBATER_B,
    JUDGE,
    METRICS,
    DebateGame,
    debate_metrics,
    debater_rewards,
    same_answers,
)
from agon_lightning.training.features import League
from agon_lightning.training.module import AgonModule, GRPOOptions

N = 4  # samples of each problem (shipped_game_fits' grpo.num_generations)
ROLE_METRICS = ("reward", "accuracy", "length", "truncation_rate")


# ---------------------------------------------------------------------- the math
def test_a_debater_wins_when_the_judge_adopts_its_answer_and_it_is_right():
    judge = ["<answer>1</answer>", "<answer> 1. </answer>", "no answer", "\\boxed{2}", "<answer>0</answer>"]
    final = [
        "<answer>1</answer>",
        "<answer>1</answer>",
        "no answer",
        "<answer>3</answer>",
        "<answer>0</answer>",
    ]
    sided = same_answers(judge, final)
    assert sided.tolist() == [1, 1, 0, 0, 1]  # normalised; a missing answer equals nothing
    judge_correct = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    turn_correct = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])  # an earlier turn may be right or wrong on its own
    assert debater_rewards(turn_correct, judge_correct, sided).tolist() == [2.0, 0.0, 1.0, 0.0, 1.0]
    agree = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
    assert debate_metrics(judge_correct, agree, sided) == pytest.approx(
        {"debate/judge_accuracy": 3 / 5, "debate/agreement": 2 / 5, "debate/judge_sided_a": 3 / 5}
    )


def test_the_spec_with_a_trained_judge_and_with_the_base_judging():
    spec = DebateGame().spec
    assert spec.policies == spec.roles == spec.answers == (DEBATER_A, DEBATER_B, JUDGE)
    assert spec.first_stage == DEBATER_A and spec.deploy == "graph" and spec.metrics == METRICS
    assert dict(spec.rivals) == {DEBATER_B: DEBATER_A, DEBATER_A: DEBATER_B}
    base = DebateGame(judge="base").spec
    assert base.policies == base.roles == base.answers == (DEBATER_A, DEBATER_B)


def test_bad_settings_name_the_value():
    with pytest.raises(ValueError, match="DebateGame.rounds must be >= 1, got 0"):
        DebateGame(rounds=0)
    with pytest.raises(
        ValueError, match=r"DebateGame.judge must be one of \('adapter', 'base'\), got 'crowd'"
    ):
        DebateGame(judge="crowd")
    with pytest.raises(ValueError, match=r"DebateGame.arguments must contain '\{b\}', got 'A: \{a\}'"):
        DebateGame(arguments="A: {a}")


# ---------------------------------------------------------------------- fits on the tiny model
def right_judge(prompt: str, sample: int) -> tuple[str, bool]:
    return "<think>1+0</think>a<answer>0</answer>", False  # ZeroIsRight: always right


class Recorded(ScriptedRollout):
    """Scripted turns; a league slot writes other ones (its prompts salted); each call's adapter and prompts
    kept. ``judge_right``: the judge always answers right."""

    def __init__(self, judge_right: bool = False) -> None:
        super().__init__(max_new_tokens=48)
        self.calls: list[tuple[str, list[str]]] = []
        self.judge_right = judge_right

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        adapter = model.active_adapter
        self.calls.append((adapter, list(prompts)))
        if adapter.endswith("_league"):
            prompts = [p + " " for p in prompts]
        says = right_judge if self.judge_right and adapter == JUDGE else scripted_text
        with mock.patch("scripted.scripted_text", says):
            return super().generate(model, tokenizer, prompts, num_samples, greedy, adapter_names)


def fit(model_dir, root, game, **settings):
    """``(module, metrics logged, each step's record, LoRA tensors before)`` of a 3-step fit of ``game``."""
    plays = Plays()
    module, _, logger, before = fit_game(
        model_dir, game, root, rollout=settings.pop("rollout", Recorded()), verifier=ZeroIsRight(),
        features=[plays], **settings,
    )  # fmt: skip
    return module, logger.metrics, plays.records, before


def read_by(module, record, texts: list[str]) -> list[str]:
    """Each text summarised as the other side reads it (row i: the record's problem of row i)."""
    grouped = [p for p in record.problems for _ in range(N)]
    return [module.summarizer.summarize(t, p, False) for t, p in zip(texts, grouped)]


def test_a_3_step_fit_trains_every_policy_every_round_and_logs_each_role_and_the_games_metrics(
    tiny_model_dir, tmp_path
):
    rollout = Recorded()
    module, logged, records, before = fit(tiny_model_dir, tmp_path, DebateGame(rounds=2), rollout=rollout)
    assert len(records) == 3 and all(changed(before, module, a) for a in (DEBATER_A, DEBATER_B, JUDGE))
    expected = {f"train/{role}/{m}" for role in (DEBATER_A, DEBATER_B, JUDGE) for m in ROLE_METRICS}
    assert expected | set(METRICS) <= set(logged) and all(len(logged[k]) == 3 for k in METRICS)
    assert not [
        k for k in logged if k.startswith(("train/conversion_rate", "train/regression_rate", "league/"))
    ]
    record = records[-1]
    a1, b1, a2, b2, judge = record.roles  # round 1, round 2, the judge: every row lines up with a1's
    assert [(r.role, r.adapter) for r in record.roles] == [
        (DEBATER_A, DEBATER_A), (DEBATER_B, DEBATER_B), (DEBATER_A, DEBATER_A), (DEBATER_B, DEBATER_B), (JUDGE, JUDGE)
    ]  # fmt: skip
    assert all(len(r.rollouts) == 2 * N for r in record.roles)
    # each turn read the other side's last one; the judge read both final ones, labelled
    assert record.summaries == read_by(module, record, a1.rollouts.texts)
    grouped = [p for p in record.problems for _ in range(N)]
    arguments = [
        fill(module.game.arguments, a=x, b=y)
        for x, y in zip(
            read_by(module, record, a2.rollouts.texts), read_by(module, record, b2.rollouts.texts)
        )
    ]
    judged = [module.prompts.challenge_prompt(module.tokenizer, p, s) for p, s in zip(grouped, arguments)]
    assert (JUDGE, judged) in rollout.calls
    # the pay: each turn its correctness, plus the win when the judge took the debater's final answer, right
    j = judge.rollouts.texts
    for turns, final in (((a1, a2), a2), ((b1, b2), b2)):
        won = judge.correct * same_answers(j, final.rollouts.texts)
        for turn in turns:
            torch.testing.assert_close(turn.rewards, turn.correct + won)
    torch.testing.assert_close(judge.rewards, judge.correct)
    assert record.reward_terms["debate/judge_sided_a"] == pytest.approx(
        float(same_answers(j, a2.rollouts.texts).mean())
    )


def test_the_base_judges_untrained_when_asked(tiny_model_dir, tmp_path):
    module, logged, records, before = fit(tiny_model_dir, tmp_path, DebateGame(rounds=1, judge="base"))
    assert module.adapter_names == (DEBATER_A, DEBATER_B) and JUDGE not in module.policy.peft_config
    assert changed(before, module, DEBATER_A) and changed(before, module, DEBATER_B)
    assert [r.role for r in records[-1].roles] == [DEBATER_A, DEBATER_B]
    assert set(METRICS) <= set(logged) and not [k for k in logged if k.startswith(f"train/{JUDGE}/")]


def test_with_the_league_debater_b_opens_against_a_past_debater_a(tiny_model_dir, tmp_path):
    rollout = Recorded(judge_right=True)  # so that A's side wins some debates
    league = League(probability=1.0, max_age=2)
    module, logged, records, _ = fit(
        tiny_model_dir, tmp_path, DebateGame(rounds=1), rollout=rollout, league=league
    )
    assert list(logged["league/played"].values()) == [
        0.0,
        1.0,
        1.0,
    ]  # no past debater A before the first update
    past_won = 0.0
    for record in records[1:]:
        own, rival, b1, judge = record.draft, record.rival_drafts, record.challenge, record.others[-1]
        assert rival.adapter == "debater_a_league" and rival.rollouts.texts != own.rollouts.texts
        assert record.summaries == read_by(
            module, record, rival.rollouts.texts
        )  # B read the past A's answers
        won = judge.correct * same_answers(judge.rollouts.texts, b1.rollouts.texts)
        torch.testing.assert_close(b1.rewards, b1.correct + won)
        # with one round the past A's answers are A's side, and what they win is nobody's: A's own opening
        # took no part in the debate, paid its correctness alone
        past_won += float((judge.correct * same_answers(judge.rollouts.texts, rival.rollouts.texts)).sum())
        torch.testing.assert_close(own.rewards, own.correct)
    assert past_won > 0


def test_the_deployed_debate_answers_each_problem_once_with_the_judge(tiny_model_dir):
    rollout, game = Recorded(), DebateGame(rounds=2)
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), game=game, lora=LoraOptions(r=2, target_modules=["q_proj"]),
        grpo=GRPOOptions(num_generations=N), rollout=rollout, verifier=ZeroIsRight(), validate_at_start=False,
    )  # fmt: skip
    module.configure_model()
    problems = ReasoningGymDataModule(train_size=6, val_size=1, batch_size=3).train_problems[:3]
    rollout.calls.clear()
    final = game.answer(module, problems)
    assert len(final) == len(final.texts) == 3
    assert [(a, len(p)) for a, p in rollout.calls] == [
        (DEBATER_A, 3), (DEBATER_B, 3), (DEBATER_A, 3), (DEBATER_B, 3), (JUDGE, 3)
    ]  # fmt: skip
