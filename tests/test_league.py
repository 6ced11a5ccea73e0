"""The league of past rivals: the rule's weights, the draw, a league step, and a fit that resumes exactly."""

from __future__ import annotations

import random

import pytest
import torch
from scripted import ScriptedRollout
from test_kl_anchor import nudge
from test_resume import assert_a_killed_run_resumes_exactly, straight_log
from test_training_paths import ZeroIsRight

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.adapters.snapshots import AdapterHistory, adapter_state, policies_of
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.formats import ThinkAnswerFormat
from agon_lightning.game.names import ALPHA, BETA
from agon_lightning.games.agon import exchange_counts
from agon_lightning.training.features.league import League, LeaguePlay, rival_weights, wins
from agon_lightning.training.module import AgonModule, GRPOOptions

N = 4


def test_each_rule_weights_the_past_rivals_as_stated():
    assert rival_weights([1, 2, 4], "uniform", [None] * 3) == [1.0, 1.0, 1.0]
    assert rival_weights([1, 2, 4], "recent", [None] * 3) == [1.0, 0.5, 0.25]
    # pfsp: (1 − w)^p, an unplayed rival counted at w = 0.5
    assert rival_weights([1, 2, 3], "pfsp", [0.9, None, 0.2], power=2) == pytest.approx([0.01, 0.25, 0.64])
    with pytest.raises(ValueError, match="league rule must be one of"):
        rival_weights([1], "elo", [None])


def test_a_win_is_right_against_a_wrong_draft_and_a_tie_is_half():
    b = torch.tensor([1, 1, 0, 0, 1])
    a = torch.tensor([0, 1, 1, 0, 1])
    assert wins(b, a) == 1 + 0.5 + 0 + 0.5 + 0.5


def history_with(versions: list[int]) -> AdapterHistory:
    history = AdapterHistory(depth=10)
    history.states = {ALPHA: {v: {} for v in versions}}
    return history


def test_the_draw_is_a_function_of_seed_and_step_and_reads_only_past_versions_within_reach():
    play = LeaguePlay(League(probability=0.3, max_age=3, seed=7))
    history = history_with([3, 4, 5, 6, 7])
    draws = [play.draw(step, ALPHA, 7, history) for step in range(2000)]
    assert draws == [
        play.draw(step, ALPHA, 7, history) for step in range(2000)
    ]  # a resumed run draws the same
    played = [d for d in draws if d is not None]
    assert 0.27 < len(played) / len(draws) < 0.33
    assert {d.version for d in played} == {4, 5, 6} and all(d.age == 7 - d.version for d in played)
    assert all(d.slot == "alpha_league" for d in played)
    other = LeaguePlay(League(probability=0.3, max_age=3, seed=8))
    assert [other.draw(s, ALPHA, 7, history) for s in range(50)] != draws[:50]
    # before the first update there is no past rival, and a league at probability 0 never plays
    assert all(play.draw(s, ALPHA, 0, history_with([0])) is None for s in range(50))
    off = LeaguePlay(None)
    assert (
        not off.active
        and off.depth == 0
        and off.slots((ALPHA,)) == {}
        and off.draw(0, ALPHA, 5, history) is None
    )


def test_by_default_the_draws_follow_the_runs_seed_so_each_seed_of_a_sweep_draws_its_own_league():
    from lightning.pytorch import seed_everything

    history = history_with([3, 4, 5, 6, 7])

    def draws(league: League) -> list:
        play = LeaguePlay(league)
        return [play.draw(s, ALPHA, 7, history) for s in range(200)]

    seed_everything(11, verbose=False)
    eleven = draws(League(probability=0.5, max_age=3))
    assert eleven == draws(League(probability=0.5, max_age=3, seed=11))  # None reads the run's seed
    seed_everything(12, verbose=False)
    assert draws(League(probability=0.5, max_age=3)) != eleven
    assert draws(League(probability=0.5, max_age=3, seed=11)) == eleven  # an explicit seed wins


def test_pfsp_brings_back_the_rival_the_challenger_beats_least():
    play = LeaguePlay(League(probability=1.0, max_age=2, rule="pfsp"))
    play.games = {ALPHA: {5: [9.0, 10.0], 6: [1.0, 10.0]}}  # it beats version 5 90% of the time, 6 only 10%
    history = history_with([5, 6, 7])
    counts = {5: 0, 6: 0}
    for step in range(1000):
        counts[play.draw(step, ALPHA, 7, history).version] += 1
    assert counts[6] / 1000 == pytest.approx(0.81 / 0.82, abs=0.02)  # weights 0.01 : 0.81


def test_bad_league_settings_name_the_value():
    with pytest.raises(ValueError, match="league.probability must be in \\[0, 1\\], got 1.5"):
        League(probability=1.5)
    with pytest.raises(ValueError, match="league.max_age must be >= 1"):
        League(max_age=0)
    with pytest.raises(ValueError, match="league.rule must be one of .* got 'elo'"):
        League(rule="elo")
    with pytest.raises(ValueError, match="the game GRPOGame declares no rivals"):
        AgonModule(game="grpo", league=League(probability=0.5))


class PastWritesOtherDrafts(ScriptedRollout):
    """Scripted drafts; a league slot writes other ones (its prompts salted), and every call is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, torch.Tensor] | None]] = []

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        adapter = model.active_adapter
        league = adapter.endswith("_league")
        self.calls.append((adapter, adapter_state(model, adapter) if league else None))
        if league:
            prompts = [p + " " for p in prompts]
        return super().generate(model, tokenizer, prompts, num_samples, greedy, adapter_names)


def phi(texts):
    return torch.tensor([ThinkAnswerFormat().score(t) for t in texts])


def test_at_a_league_step_the_challenger_reads_and_is_graded_against_the_past_drafter(tiny_model_dir):
    problems = ReasoningGymDataModule(train_size=12, val_size=1, batch_size=3).train_problems[:3]
    rollout = PastWritesOtherDrafts()
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=2, target_modules=["q_proj"]),
        grpo=GRPOOptions(num_generations=N), rollout=rollout, verifier=ZeroIsRight(), validate_at_start=False,
        league=League(probability=1.0, max_age=2),
    )  # fmt: skip
    module.configure_model()
    assert policies_of(module.policy) == [ALPHA, BETA] and module.adapter_history.depth == 2
    module.adapter_history.keep(module.policy, module.adapter_names, 0)
    first = adapter_state(module.policy, ALPHA)
    nudge(module, ALPHA, 0)  # an update: alpha moved
    module.policy_version = 1
    record = module.play(problems)  # step 0: alpha drafts, beta challenges

    assert [c[0] for c in rollout.calls] == [ALPHA, "alpha_league", BETA]
    sampled_with = rollout.calls[1][1]  # the slot held alpha as it was one update ago
    assert all(torch.equal(sampled_with[k], first[k]) for k in first)
    assert not all(torch.equal(first[k], v) for k, v in adapter_state(module.policy, ALPHA).items())
    rival = record.rival_drafts
    assert rival.adapter == "alpha_league" and rival.versions.tolist() == [0] * len(problems) * N
    assert rival.rollouts.texts != record.draft.rollouts.texts  # the past drafter wrote other drafts
    grouped = [p for p in problems for _ in range(N)]
    assert record.summaries == [
        module.summarizer.summarize(t, p) for t, p in zip(rival.rollouts.texts, grouped)
    ]
    # the conversion bonus is against the draft the challenge read: the past drafter's
    a, b = rival.correct, record.challenge.correct
    torch.testing.assert_close(
        record.challenge.rewards, 2 * b + b * (1 - a) + 0.5 * phi(record.challenge.rollouts.texts)
    )
    d = record.draft  # the drafter still trains on its own drafts, graded on themselves
    assert d.adapter == ALPHA
    torch.testing.assert_close(d.rewards, 2 * d.correct + 0.5 * phi(d.rollouts.texts))
    converted, wrong = exchange_counts(record)[:2]
    assert wrong == (a == 0).sum() and converted == ((a == 0) & (b == 1)).sum()
    assert record.league == {
        "league/played": 1.0, "league/rival_age": 1.0, "league/rival_version": 0.0,
        "league/win_rate": wins(b, a) / len(b), "league/past_win_rate": wins(b, a) / len(b),
    }  # fmt: skip
    league = next(f for f in module.features if isinstance(f, LeaguePlay))
    assert league.games == {ALPHA: {0: [wins(b, a), float(len(b))]}}


LEAGUE = ['--model.league={"probability": 0.5, "max_age": 2, "rule": "pfsp", "seed": 3}']


@pytest.fixture(scope="module")
def straight_league(tiny_model_dir, tmp_path_factory):
    return straight_log(tiny_model_dir, tmp_path_factory.mktemp("straight_league"), *LEAGUE)


def test_a_fit_with_a_league_logs_its_games_and_resumes_exactly(tiny_model_dir, tmp_path, straight_league):
    import csv

    rows = [r for r in csv.DictReader((straight_league / "metrics.csv").open()) if r.get("league/played")]
    played = [r for r in rows if r["league/played"] == "1.0"]
    assert len(rows) == 6 and 0 < len(played) < 6  # it played some steps and sat out others
    assert {r["league/rival_age"] for r in played} <= {"1.0", "2.0"}
    # a step that sat out logs the drafter now as the opponent (age 0), never the last rival again
    assert all(r["league/rival_age"] == "0.0" for r in rows if r["league/played"] == "0.0")
    expected = [random.Random(f"3:{s}").random() < 0.5 for s in range(6)]
    assert [r["league/played"] == "1.0" for r in rows] == [e and s > 0 for s, e in enumerate(expected)]
    state = assert_a_killed_run_resumes_exactly(tiny_model_dir, tmp_path / "killed", straight_league, *LEAGUE)
    assert state["agon"]["league"]["games"]  # the challenger's record against its past rivals travels too
