"""The prover–verifier game: its pay on hand-built judgements, and 3-step fits on the tiny model (with a league)."""

from __future__ import annotations

import re
from unittest import mock

import pytest
import torch
from scripted import ScriptedRollout, scripted_text
from shipped_game_fits import Plays, changed, fit_game
from test_training_paths import ZeroIsRight

from agon_lightning.game.prompts import fill
from agon_lightning.games.prover_verifier import (
    DEFAULT_ASK,
    METRICS,
    PROVER,
    VERIFIER,
    ProverVerifierGame,
    judged_right,
    judgements,
    prover_rewards,
    pv_metrics,
    reasons,
)
from agon_lightning.training.features import League

N = 4  # samples of each problem (shipped_game_fits' grpo.num_generations)
ROLE_METRICS = ("reward", "accuracy", "length", "truncation_rate")


# ---------------------------------------------------------------------- the math
def test_the_prover_is_paid_for_right_solutions_and_more_for_those_the_verifier_accepts():
    correct = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    said = ["<answer>yes</answer>", "<answer> No </answer>", "<answer>YES</answer>", "<answer>no</answer>",
            "it is right", "<think>yes</think><answer>2</answer>"]  # fmt: skip
    accepted, rejected = judgements(said)
    assert accepted.tolist() == [1, 0, 1, 0, 0, 0] and rejected.tolist() == [0, 1, 0, 1, 0, 0]
    assert prover_rewards(correct, accepted, 0.5).tolist() == [1.5, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert prover_rewards(correct, accepted, 0.0).tolist() == correct.tolist()
    # yes to a right one, no to a wrong one; no judgement is never right
    right = judged_right(correct, accepted, rejected)
    assert right.tolist() == [1, 0, 0, 1, 0, 0]
    assert reasons(accepted, rejected, right) == [
        "ok", "wrong_judgement", "wrong_judgement", "ok", "no_judgement", "no_judgement"
    ]  # fmt: skip
    assert pv_metrics(correct, accepted, rejected) == pytest.approx(
        {"pv/accepted": 2 / 6, "pv/judged_right": 2 / 6, "pv/accepted_wrong": 1 / 6}
    )


def test_the_spec_names_its_policies_roles_and_rival():
    spec = ProverVerifierGame().spec
    assert spec.policies == spec.roles == (PROVER, VERIFIER) and spec.first_stage == PROVER
    assert dict(spec.rivals) == {VERIFIER: PROVER} and spec.answers == (PROVER,) and spec.deploy == "single"
    assert spec.metrics == ("pv/accepted", "pv/judged_right", "pv/accepted_wrong")


def test_bad_settings_name_the_value():
    with pytest.raises(ValueError, match=r"acceptance_bonus must be >= 0, got -0.5"):
        ProverVerifierGame(acceptance_bonus=-0.5)
    with pytest.raises(ValueError, match=r"ask must contain '\{solution\}', got 'Right\?'"):
        ProverVerifierGame(ask="Right?")


# ---------------------------------------------------------------------- fits on the tiny model
ASKED = "Is this solution right?"  # in DEFAULT_ASK: how the rollout tells the verifier's prompts
assert ASKED in DEFAULT_ASK


def judged_text(prompt: str, sample: int) -> tuple[str, bool]:
    """The scripted completion with its answer 0, 1, 2 said as yes, no, or neither."""
    text, cut = scripted_text(prompt, sample)
    return re.sub(
        r"<answer>([01])</answer>", lambda m: f"<answer>{('yes', 'no')[int(m[1])]}</answer>", text
    ), cut


class Judging(ScriptedRollout):
    """Scripted solutions; the verifier says yes, no or neither; a past prover (its league slot) writes
    other solutions (its prompts salted). What each adapter wrote for each list of prompts is recorded."""

    def __init__(self) -> None:
        super().__init__(max_new_tokens=48)
        self.wrote: dict[tuple[str, tuple[str, ...]], list[str]] = {}

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        adapter, asked = model.active_adapter, tuple(prompts)
        if adapter.endswith("_league"):
            prompts = [p + " " for p in prompts]
        with mock.patch("scripted.scripted_text", judged_text if ASKED in prompts[0] else scripted_text):
            batch = super().generate(model, tokenizer, prompts, num_samples, greedy, adapter_names)
        self.wrote[adapter, asked] = batch.texts
        return batch


def fit(model_dir, root, **settings):
    """``(module, metrics logged, each step's record, LoRA tensors before)`` of a 3-step fit of the game."""
    plays, rollout = Plays(), settings.pop("rollout", Judging())
    module, _, logger, before = fit_game(
        model_dir,
        ProverVerifierGame(),
        root,
        rollout=rollout,
        verifier=ZeroIsRight(),
        features=[plays],
        **settings,
    )
    return module, logger.metrics, plays.records, before


def read(module, record, solutions: list[str]) -> tuple[str, ...]:
    """The verifier's prompts when it judges ``solutions`` (row i: the record's problem of row i): each whole."""
    grouped = [p for p in record.problems for _ in range(N)]
    ask = module.game.ask
    return tuple(
        module.prompts.challenge_prompt(module.tokenizer, p, fill(ask, solution=t))
        for p, t in zip(grouped, solutions)
    )


def test_a_3_step_fit_trains_both_policies_and_logs_each_role_and_the_games_metrics(tiny_model_dir, tmp_path):
    rollout = Judging()
    module, logged, records, before = fit(tiny_model_dir, tmp_path, rollout=rollout)
    assert len(records) == 3
    assert changed(before, module, PROVER) and changed(before, module, VERIFIER)
    expected = {f"train/{role}/{m}" for role in (PROVER, VERIFIER) for m in ROLE_METRICS}
    assert expected | set(METRICS) <= set(logged)
    assert all(len(logged[k]) == 3 for k in METRICS)  # every step
    assert not [
        k for k in logged if k.startswith(("train/conversion_rate", "train/regression_rate", "league/"))
    ]
    record = records[-1]
    assert [(r.role, r.adapter) for r in record.roles] == [(PROVER, PROVER), (VERIFIER, VERIFIER)]
    prover, verifier = record.roles
    assert len(prover.rollouts) == len(verifier.rollouts) == 2 * N and record.rival_drafts is None
    # the verifier judged each whole solution, and each role was paid as the game says
    assert verifier.rollouts.texts == rollout.wrote[VERIFIER, read(module, record, prover.rollouts.texts)]
    accepted, rejected = judgements(verifier.rollouts.texts)
    torch.testing.assert_close(verifier.rewards, judged_right(prover.correct, accepted, rejected))
    torch.testing.assert_close(prover.rewards, prover_rewards(prover.correct, accepted, 1.0))
    assert 0 < float(accepted.sum()) < len(accepted)  # it said yes and no: something to learn


def test_with_the_league_the_verifier_trains_on_a_past_provers_solutions(tiny_model_dir, tmp_path):
    rollout = Judging()
    league = League(probability=1.0, max_age=2)
    module, logged, records, before = fit(tiny_model_dir, tmp_path, rollout=rollout, league=league)
    assert {"league/played", "league/rival_age", "league/win_rate"} <= set(logged)
    assert list(logged["league/played"].values()) == [0.0, 1.0, 1.0]  # no past prover before the first update
    assert records[0].rival_drafts is None
    for record in records[1:]:
        prover, rival, verifier = record.draft, record.rival_drafts, record.challenge
        assert rival.adapter == "prover_league" and rival.versions.max() < record.step
        assert rival.rollouts.texts != prover.rollouts.texts  # the past prover wrote other solutions
        # the verifier read the past prover's whole solutions, and is trained and graded on those judgements
        assert verifier.rollouts.texts == rollout.wrote[VERIFIER, read(module, record, rival.rollouts.texts)]
        accepted, rejected = judgements(verifier.rollouts.texts)
        torch.testing.assert_close(verifier.rewards, judged_right(rival.correct, accepted, rejected))
        # the prover is paid on its own solutions, as the verifier judged them (those judgements not trained)
        accepted, _ = judgements(rollout.wrote[VERIFIER, read(module, record, prover.rollouts.texts)])
        torch.testing.assert_close(prover.rewards, prover_rewards(prover.correct, accepted, 1.0))
    assert changed(before, module, PROVER) and changed(before, module, VERIFIER)
