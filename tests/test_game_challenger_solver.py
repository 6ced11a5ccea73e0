"""The challenger–solver game: its question parser and pay on hand-built answers, what it refuses at
construction, and a 3-step fit on the tiny model."""

from __future__ import annotations

import zlib
from unittest import mock

import pytest
import torch
from scripted import ScriptedRollout, scripted_text
from shipped_game_fits import Plays, changed, fit_game

from agon_lightning.game.prompts import fill
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem
from agon_lightning.games.challenger_solver import (
    CHALLENGER,
    DEFAULT_POSE,
    SOLVER,
    ChallengerSolverGame,
    posed_problem,
    posed_question,
    self_consistency,
    uncertainty_reward,
)
from agon_lightning.training.features import League
from agon_lightning.training.module import AgonModule, GRPOOptions

N, M = (
    4,
    3,
)  # posings of each seed problem (shipped_game_fits' grpo.num_generations); answers of each posed one
ROLE_METRICS = ("reward", "accuracy", "length", "truncation_rate")


# ---------------------------------------------------------------------- the math
def test_the_posed_question_is_the_last_question_block_after_the_trace():
    assert posed_question("<think>hm</think>New: <question> What is 2 + 3? </question>") == "What is 2 + 3?"
    assert (
        posed_question("<question>a</question> then <question>b\nc</question>") == "b\nc"
    )  # no trace: all of it
    assert posed_question("<think><question>inside the trace</question></think>none after") is None
    assert posed_question("<think>cut off <question>x</question>") is None  # the trace never closed
    assert posed_question("<think>t</think><question>  </question>") is None  # blank
    assert posed_question("<think>t</think><question>never closed") is None
    assert posed_question("<think>t</think>What is 1 + 1?") is None  # no block


def test_the_solver_agrees_with_its_majority_and_the_challenger_is_paid_for_its_doubt():
    answers = ["3", " 3 ", "4", None, "7", "8", None, None, None, "5", "5.", "$5$"]
    agrees, p_hat = self_consistency(answers, 3)
    # normalised votes; a tie goes to the earliest; no vote: no majority; None never agrees
    assert agrees.tolist() == [1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1]
    torch.testing.assert_close(p_hat, torch.tensor([2 / 3, 1 / 3, 0.0, 1.0]))
    torch.testing.assert_close(
        uncertainty_reward(torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0])), torch.tensor([0.0, 0.5, 1.0, 0.5, 0.0])
    )
    with pytest.raises(ValueError, match="5 answers do not split into groups of 2"):
        self_consistency(["1"] * 5, 2)


def test_a_posed_problem_keeps_the_seeds_conversation():
    assert posed_problem(Problem("seed", "4"), "new") == Problem("new")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "seed"}]
    posed = posed_problem(Problem.from_messages(messages, "4"), "new")
    assert posed.messages == [messages[0], {"role": "user", "content": "new"}] and posed.answer is None


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"solver_samples": 1}, "solver_samples must be an int >= 2 .* got 1"),
        ({"solver_samples": True}, "solver_samples must be an int >= 2 .* got True"),
        ({"pose_prompt": "Pose a problem in <question></question>"}, "pose_prompt must contain '{question}'"),
        (
            {"pose_prompt": "Pose one like {question}"},
            "pose_prompt must contain '<question>'.*got 'Pose one like",
        ),
    ],
)
def test_bad_settings_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ChallengerSolverGame(**kwargs)


class OwnWeights(ScriptedRollout):
    """A backend with its own copy of the weights, so it may sample ahead."""

    keeps_own_weights = True

    def __init__(self, max_staleness: int) -> None:
        super().__init__()
        self._keep_staleness(max_staleness)


def test_the_spec_and_what_it_refuses_at_construction():
    spec = ChallengerSolverGame().spec
    assert (spec.policies, spec.roles, spec.first_stage) == ((SOLVER, CHALLENGER), (CHALLENGER, SOLVER), None)
    assert (dict(spec.rivals), spec.answers, spec.deploy) == ({}, (SOLVER,), "single")
    assert AgonModule(game=ChallengerSolverGame()).evaluator.deployed_key == SOLVER
    with pytest.raises(
        ValueError, match="rollout.max_staleness=1 .* the game ChallengerSolverGame samples its own"
    ):
        AgonModule(game=ChallengerSolverGame(), rollout=OwnWeights(1), grpo=GRPOOptions(tis_cap=2))
    with pytest.raises(ValueError, match="the game ChallengerSolverGame declares no rivals"):
        AgonModule(game=ChallengerSolverGame(), league=League(probability=0.5))


# ---------------------------------------------------------------------- a fit on the tiny model
def posing_text(prompt: str, sample: int) -> tuple[str, bool]:
    """A challenger's posing: a new question in two of three, none in the third; never cut off."""
    h = zlib.crc32(f"{prompt}|{sample}".encode())
    if h % 3 == 0:
        return "<think>1+1</think>no idea", False
    return f"<think>1+</think><question>{h % 9} minus {h % 4}?</question>", False


class Posing(ScriptedRollout):
    """The scripted rollout, posing questions when asked to (the prompt asks for a <question> block)."""

    def __init__(self) -> None:
        super().__init__(max_new_tokens=48)
        self.calls: list[tuple[str, list[str], int]] = []

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        self.calls.append((model.active_adapter, list(prompts), num_samples))
        posing = "<question>" in prompts[0]
        with mock.patch("scripted.scripted_text", posing_text if posing else scripted_text):
            return super().generate(model, tokenizer, prompts, num_samples, greedy, adapter_names)


def test_a_3_step_fit_trains_both_policies_on_posed_problems_and_logs_their_metrics(tiny_model_dir, tmp_path):
    plays, rollout = Plays(), Posing()
    game = ChallengerSolverGame(solver_samples=M)
    module, _, logger, before = fit_game(tiny_model_dir, game, tmp_path, rollout=rollout, features=[plays])
    logged, records = logger.metrics, plays.records
    assert len(records) == 3 and changed(before, module, CHALLENGER) and changed(before, module, SOLVER)
    expected = {f"train/{prefix}/{m}" for prefix in ("challenge", SOLVER) for m in ROLE_METRICS}
    assert expected | {"cs/posed_parse_rate", "cs/challenger_reward", "cs/solver_agreement"} <= set(logged)
    assert all(len(logged[k]) == 3 for k in ("cs/posed_parse_rate", "cs/challenger_reward"))  # every step
    assert not [
        k for k in logged if k.startswith(("train/conversion_rate", "train/regression_rate", "league/"))
    ]
    tokenizer = module.tokenizer
    for step, record in enumerate(records):
        challenger, solver = record.roles
        assert [(r.role, r.adapter, r.group_size) for r in record.roles] == [
            (CHALLENGER, CHALLENGER, N), (SOLVER, SOLVER, M)
        ]  # fmt: skip
        assert len(challenger.rollouts) == 2 * N and len(solver.rollouts) == 2 * N * M
        pose = [
            module.prompts.render(tokenizer, fill(DEFAULT_POSE, question=p.question)) for p in record.problems
        ]
        assert (CHALLENGER, pose, N) in rollout.calls  # the challenger read each seed problem, N times
        questions = [posed_question(t) for t in challenger.rollouts.texts]
        seeds = [p.question for p in record.problems for _ in range(N)]
        asked = [s if q is None else q for s, q in zip(seeds, questions)]
        assert record.summaries == [
            q for q in asked for _ in range(M)
        ]  # a posing without a question: the seed
        assert (
            SOLVER,
            [module.prompts.draft_prompt(tokenizer, Problem(q)) for q in asked],
            M,
        ) in rollout.calls
        agrees, p_hat = self_consistency([extract_answer(t) for t in solver.rollouts.texts], M)
        posed = torch.tensor([q is not None for q in questions], dtype=torch.float32)
        torch.testing.assert_close(solver.rewards, agrees)
        torch.testing.assert_close(challenger.rewards, (1 - 2 * (p_hat - 0.5).abs()) * posed)
        assert logged["cs/posed_parse_rate"][step] == pytest.approx(float(posed.mean()))
        if posed.any():
            assert logged["cs/solver_agreement"][step] == pytest.approx(float(p_hat[posed == 1].mean()))
        seed_rows = [v.reason.endswith("(seed problem)") for v in solver.verdicts]
        assert seed_rows == [q is None for q in questions for _ in range(M)]
    rates = list(logged["cs/posed_parse_rate"].values())
    assert 0 < min(rates) and max(rates) < 1  # some posings had a question and some had none
    assert any(0 < float(r.rewards.sum()) for rec in records for r in rec.roles)
