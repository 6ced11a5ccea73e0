"""The zero-sum game: its payoffs and role-conditioned advantages on hand-built rewards, and 3-step fits
on the tiny model (plain, with a league, and the baselines through a checkpoint)."""

from __future__ import annotations

import pytest
import torch
from shipped_game_fits import Plays, changed, fit_game
from test_training_paths import ZeroIsRight

from agon_lightning.games.records import RoleRollout
from agon_lightning.games.zero_sum import (
    FIRST,
    SECOND,
    ZeroSumGame,
    agreeing_groups,
    moving_average,
    outcome_rates,
    zero_sum_payoff,
)
from agon_lightning.training.features import KLAnchor, KLAnchors, League
from agon_lightning.training.module import AgonModule, GRPOOptions

N = 4  # samples of each problem (shipped_game_fits' grpo.num_generations)
ROLE_METRICS = ("reward", "accuracy", "length", "truncation_rate")
GAME_METRICS = (
    "zs/first_win_rate",
    "zs/second_win_rate",
    "zs/tie_rate",
    "zs/baseline_first",
    "zs/baseline_second",
)


def role(name: str, rewards: list[float]) -> RoleRollout:
    """A role's rollouts as the advantages read them: only the rewards."""
    return RoleRollout("alpha", None, [], torch.tensor(rewards), role=name)


# ---------------------------------------------------------------------- the math
def test_the_side_right_when_the_other_is_wrong_wins_and_a_tie_pays_nothing():
    second = torch.tensor([1.0, 1.0, 0.0, 0.0])
    first = torch.tensor([0.0, 1.0, 1.0, 0.0])
    assert zero_sum_payoff(second, first).tolist() == [1.0, 0.0, -1.0, 0.0]
    assert zero_sum_payoff(first, second).tolist() == [-1.0, 0.0, 1.0, 0.0]  # zero-sum
    rates = outcome_rates(second, first)
    assert rates == {"zs/first_win_rate": 0.25, "zs/second_win_rate": 0.25, "zs/tie_rate": 0.5}


def test_advantages_are_rewards_minus_each_roles_moving_baseline_updated_after():
    game = ZeroSumGame(decay=0.5)
    first, second = role(FIRST, [1.0, -1.0, 1.0, 1.0]), role(SECOND, [-1.0, 1.0, -1.0, -1.0])
    zero_std = game.advantages([first, second], 2, GRPOOptions())
    # step 1: baselines start at 0, so the advantages are the rewards themselves (no std scaling)
    assert first.advantages.tolist() == [1.0, -1.0, 1.0, 1.0] and second.advantages.tolist() == [
        -1,
        1,
        -1,
        -1,
    ]
    assert zero_std.tolist() == [0.0, 1.0, 0.0, 1.0]  # groups of N = 2: [1, -1] differ, [1, 1] agree
    assert game.baselines == {FIRST: 0.25, SECOND: -0.25}  # 0.5·0 + 0.5·mean
    assert game.metrics(None) == {"zs/baseline_first": 0.0, "zs/baseline_second": 0.0}  # the ones used
    first, second = role(FIRST, [1.0, 1.0]), role(SECOND, [0.0, 0.0])
    game.advantages([first, second], 2, GRPOOptions())
    assert first.advantages.tolist() == [0.75, 0.75] and second.advantages.tolist() == [0.25, 0.25]
    assert game.baselines == {FIRST: moving_average(0.25, 1.0, 0.5), SECOND: moving_average(-0.25, 0.0, 0.5)}
    assert game.metrics(None) == {"zs/baseline_first": 0.25, "zs/baseline_second": -0.25}
    role_groups = role(FIRST, [1.0, 1.0, 1.0, 0.0])
    role_groups.group_size = 4  # a role's own group size beats N
    assert ZeroSumGame().advantages([role_groups], 2, GRPOOptions()).tolist() == [0.0]
    assert agreeing_groups(torch.tensor([2.0, 2.0, 2.0]), 3).tolist() == [1.0]
    with pytest.raises(ValueError, match="3 rewards do not split into groups of 2"):
        agreeing_groups(torch.zeros(3), 2)


@pytest.mark.parametrize("decay", [1.0, -0.1, "0.9", True])
def test_a_bad_decay_names_the_value(decay):
    with pytest.raises(ValueError, match=rf"decay must be a number in \[0, 1\).*got {decay!r}"):
        ZeroSumGame(decay=decay)


def test_the_spec_one_adapter_both_roles_rivals_and_no_kl_rival_reference():
    spec = ZeroSumGame().spec
    assert (spec.policies, spec.roles, spec.first_stage, spec.deploy) == (
        ("alpha",),
        (FIRST, SECOND),
        FIRST,
        "single",
    )
    assert dict(spec.rivals) == {SECOND: FIRST, FIRST: SECOND} and spec.answers == (FIRST, SECOND)
    kl = KLAnchors(roles={SECOND: KLAnchor(reference="rival", beta=0.1)})
    with pytest.raises(
        ValueError, match="ZeroSumGame plays every role with one adapter .* its rival is itself"
    ):
        AgonModule(game=ZeroSumGame(), kl=kl)


# ---------------------------------------------------------------------- fits on the tiny model
def fit(model_dir, root, steps=3, **settings):
    """``(module, metrics logged, each step's record, LoRA tensors before)`` of a fit of the game."""
    plays = Plays()
    module, _, logger, before = fit_game(
        model_dir, ZeroSumGame(), root, steps, verifier=ZeroIsRight(), features=[plays], **settings
    )
    return module, logger.metrics, plays.records, before


def test_a_3_step_fit_trains_alpha_and_logs_each_role_and_the_games_metrics(tiny_model_dir, tmp_path):
    module, logged, records, before = fit(tiny_model_dir, tmp_path)
    assert len(records) == 3 and changed(before, module, "alpha")
    expected = {f"train/{r}/{m}" for r in (FIRST, SECOND) for m in ROLE_METRICS}
    assert expected | set(GAME_METRICS) | {"train/frac_zero_std_groups"} <= set(logged)
    assert all(len(logged[k]) == 3 for k in GAME_METRICS)  # every step
    assert not [
        k for k in logged if k.startswith(("train/conversion_rate", "train/regression_rate", "league/"))
    ]
    game, baselines = module.game, {FIRST: 0.0, SECOND: 0.0}
    for step, record in enumerate(records):
        first, second = record.roles
        assert (first.role, second.role, len(first.rollouts), len(second.rollouts)) == (
            FIRST,
            SECOND,
            2 * N,
            2 * N,
        )
        torch.testing.assert_close(second.rewards, second.correct - first.correct)
        torch.testing.assert_close(first.rewards, -second.rewards)
        # each step's advantages against the baselines as the moving averages left them, and those logged
        assert logged["zs/baseline_first"][step] == pytest.approx(baselines[FIRST])
        assert logged["zs/baseline_second"][step] == pytest.approx(baselines[SECOND])
        torch.testing.assert_close(first.advantages, first.rewards - baselines[FIRST])
        torch.testing.assert_close(second.advantages, second.rewards - baselines[SECOND])
        for r in (first, second):
            baselines[r.role] = moving_average(baselines[r.role], float(r.rewards.mean()), game.decay)
    assert game.baselines == pytest.approx(baselines) and game.baselines != {FIRST: 0.0, SECOND: 0.0}


def test_with_the_league_the_second_answers_a_past_firsts_drafts(tiny_model_dir, tmp_path):
    module, logged, records, before = fit(tiny_model_dir, tmp_path, league=League(probability=1.0, max_age=2))
    assert list(logged["league/played"].values()) == [
        0.0,
        1.0,
        1.0,
    ]  # no past version before the first update
    assert records[0].rival_drafts is None
    for record in records[1:]:
        rival, second = record.rival_drafts, record.challenge
        assert rival.adapter == "alpha_league" and rival.versions.max() < record.step
        grouped = [p for p in record.problems for _ in range(N)]
        assert record.summaries == [module.summarizer.summarize(t, p, bool(c)) for t, p, c in zip(
            rival.rollouts.texts, grouped, rival.rollouts.truncated)]  # fmt: skip
        torch.testing.assert_close(
            second.rewards, second.correct - rival.correct
        )  # graded against what it read
        torch.testing.assert_close(record.draft.rewards, record.draft.correct - second.correct)
    assert changed(before, module, "alpha")


def test_the_baselines_survive_a_checkpoint_and_continue_exactly(tiny_model_dir, tmp_path):
    module, _, _, _ = fit(tiny_model_dir, tmp_path, steps=2)
    game = module.game
    path = tmp_path / "zs.ckpt"
    module.trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=False)
    assert checkpoint["agon"]["game"] == {"baselines": game.baselines}
    resumed = AgonModule(game=ZeroSumGame())
    resumed.on_load_checkpoint(checkpoint)
    assert resumed.game.baselines == game.baselines
    # the next step's advantages and baselines are the same from the resumed game as from the original
    rewards = {FIRST: [1.0, -1.0, 0.0, 1.0], SECOND: [-1.0, 1.0, 0.0, -1.0]}
    roles = [[role(r, v) for r, v in rewards.items()] for _ in range(2)]
    for g, rs in zip((game, resumed.game), roles):
        g.advantages(rs, N, GRPOOptions())
    for a, b in zip(*roles):
        assert torch.equal(a.advantages, b.advantages)
    assert resumed.game.baselines == game.baselines
    with pytest.raises(ValueError, match=r"baselines are for roles \['drafter'\], not \['first', 'second'\]"):
        ZeroSumGame().load_state_dict({"baselines": {"drafter": 0.5}})


# ---------------------------------------------------------------------- several processes
def test_with_two_processes_the_baselines_are_the_mean_over_every_processs_rows():
    """Rank 0's rows all +1 and rank 1's all -1 average to 0: both ranks' baselines stay 0 (each alone: ±0.75)."""
    import socket

    import torch.multiprocessing as mp
    from zero_sum_ranks import baselines_on_rank

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=baselines_on_rank, args=(rank, port, out)) for rank in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert results[0] == results[1] == {FIRST: 0.0, SECOND: 0.0}
