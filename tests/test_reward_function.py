"""TRL-style reward functions as verifiers: plain, conversational and async, chosen by import path."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest

from agon_lightning.cli import AgonCLI
from agon_lightning.deploy.bundle import build_component, component_spec
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem
from agon_lightning.verifiers.reward_function import RewardFunctionVerifier

ROOT = Path(__file__).resolve().parents[1]
CALLS: list[dict] = []


def accuracy(completions, solution, **kwargs):
    """TRL's usual shape: the gold answer in a dataset column, every other column in kwargs."""
    CALLS.append({"completions": completions, "solution": solution, **kwargs})
    return [1.0 if extract_answer(c) == s else 0.0 for c, s in zip(completions, solution)]


def conversational_format(prompts, completions, **kwargs):
    assert all(p[0]["role"] == "user" for p in prompts)
    return [1.0 if "<answer>" in c[0]["content"] else 0.0 for c in completions]


async def async_partial(completions, answer, level, **kwargs):
    await asyncio.sleep(0)
    return [None if lv is None else (0.5 if a in c else -1.0) for c, a, lv in zip(completions, answer, level)]


def needs_state(completions, trainer_state):
    return [0.0] * len(completions)


def picky(completions, **kwargs):
    if any("boom" in c for c in completions):
        raise RuntimeError("cannot score boom")
    return [1.0] * len(completions)


PROBLEMS = [
    Problem("1+1", "2", {"level": 1}),
    Problem("2+2", "4", {"level": 2, "source": "x"}),
    Problem("3+3", "6", {}),
]
COMPLETIONS = ["<think>1+1=2</think><answer>2</answer>", "<answer>5</answer>", "the answer is 6"]


def test_a_plain_trl_reward_sees_prompts_completions_and_every_column():
    CALLS.clear()
    verifier = RewardFunctionVerifier("test_reward_function.accuracy", answer_column="solution")
    verdicts = verifier.verify_batch(COMPLETIONS, PROBLEMS)
    assert [v.correct for v in verdicts] == [True, False, False] and [v.score for v in verdicts] == [
        1.0,
        0.0,
        0.0,
    ]
    (call,) = CALLS  # one batch call, as TRL makes it
    assert call["prompts"] == ["1+1", "2+2", "3+3"] and call["solution"] == ["2", "4", "6"]
    assert call["level"] == [1, 2, None] and call["source"] == [None, "x", None]
    assert "trainer_state" not in call and "completion_ids" not in call


def test_a_conversational_reward_gets_messages():
    verifier = RewardFunctionVerifier(conversational_format, conversational=True)
    assert [v.correct for v in verifier.verify_batch(COMPLETIONS, PROBLEMS)] == [True, True, False]
    assert verifier.function == "test_reward_function.conversational_format"  # what a bundle records


def test_an_async_reward_is_awaited_thresholded_and_scored():
    verifier = RewardFunctionVerifier(async_partial, threshold=0.5, score_range=(-1.0, 1.0))
    verdicts = verifier.verify_batch(COMPLETIONS, PROBLEMS)
    assert [v.correct for v in verdicts] == [True, False, False]
    assert [v.score for v in verdicts] == [0.75, 0.0, 0.0]
    assert [v.reason for v in verdicts] == ["ok", "wrong_answer", "no_reward"]  # None: does not apply

    async def inside_a_running_loop():
        return verifier.verify(COMPLETIONS[0], PROBLEMS[0])

    assert asyncio.run(inside_a_running_loop()).correct


def test_errors_name_the_function_and_rows_it_fails_on(caplog):
    with pytest.raises(ValueError, match="requires \\['trainer_state'\\]"):
        RewardFunctionVerifier(needs_state)
    with pytest.raises(ValueError, match="cannot import reward function 'test_reward_function.nope'"):
        RewardFunctionVerifier("test_reward_function.nope")
    with pytest.raises(ValueError, match="low < high"):
        RewardFunctionVerifier(accuracy, score_range=(1.0, 1.0))
    verifier = RewardFunctionVerifier(picky)
    verdicts = verifier.verify_batch(["fine", "boom", "ok"], PROBLEMS)
    assert [v.correct for v in verdicts] == [True, False, True]
    assert verdicts[1].reason == "reward_error: RuntimeError: cannot score boom"
    assert "row 1 failed in the reward functions (test_reward_function.picky)" in caplog.text
    with pytest.raises(RuntimeError, match="cannot score boom"):  # every row fails: a bug, not model output
        verifier.verify_batch(["boom", "boom"], PROBLEMS[:2])
    wrong_length = RewardFunctionVerifier(lambda completions, **kw: [1.0])
    with pytest.raises(ValueError, match="one reward per completion: 2 expected, got 1 values"):
        wrong_length.rewards(["a", "b"], PROBLEMS[:2])


def test_chosen_from_yaml_by_import_path_and_rebuilt_from_a_bundle(tiny_model_dir, tmp_path):
    config = tmp_path / "verifier.yaml"
    config.write_text(
        "model:\n  verifier:\n    class_path: agon_lightning.verifiers.reward_function.RewardFunctionVerifier\n"
        "    init_args: {function: test_reward_function.accuracy, threshold: 1.0, answer_column: solution}\n"
    )
    cli = AgonCLI(args=["--config", str(ROOT / "configs/agon.yaml"), "--config", str(config),
                        f"--model.model_name_or_path={tiny_model_dir}"], run=False)  # fmt: skip
    verifier = cli.model.verifier
    assert isinstance(verifier, RewardFunctionVerifier) and verifier.answer_column == "solution"
    rebuilt = build_component(component_spec(verifier))
    assert rebuilt.function == "test_reward_function.accuracy" and rebuilt.score_range == (0.0, 1.0)
    assert [v.correct for v in rebuilt.verify_batch(COMPLETIONS, PROBLEMS)] == [True, False, False]
    short = AgonCLI(args=["--config", str(ROOT / "configs/agon.yaml"), "--model.verifier=reward_function",
                          "--model.verifier.function=test_reward_function.accuracy",
                          "--model.verifier.answer_column=solution"], run=False)  # fmt: skip
    assert isinstance(short.model.verifier, RewardFunctionVerifier)


# ---------------------------------------------------------------------- several functions, weighted, graded
def graded_accuracy(completions, solution, **kwargs):
    return [1.0 if s in c else 0.0 for c, s in zip(completions, solution)]


def half_format(completions, **kwargs):
    return [0.5 if "<answer>" in c else None for c in completions]


TRL_ROWS = [
    Problem("1+1", None, {"solution": "2", "level": 1}),
    Problem("2+2", None, {"solution": "4", "level": 2}),
    Problem("3+3", None, {"solution": "6", "level": 3}),
]


def test_several_functions_sum_with_weights_and_none_drops_out():
    v = RewardFunctionVerifier([graded_accuracy, half_format], reward_weights=[1.0, 2.0])
    verdicts = v.verify_batch(["<answer>2</answer>", "<answer>5</answer>", "the answer is 7"], TRL_ROWS)
    assert [x.rewards for x in verdicts] == [
        {"graded_accuracy": 1.0, "half_format": 0.5},
        {"graded_accuracy": 0.0, "half_format": 0.5},
        {"graded_accuracy": 0.0, "half_format": None},
    ]
    assert [x.reward for x in verdicts] == [2.0, 1.0, 0.0]  # 1·1 + 2·0.5; 0 + 1; 0 (format does not apply)
    assert [x.correct for x in verdicts] == [True, False, False]  # c: the first function >= 1
    assert v.graded and v.names == ["graded_accuracy", "half_format"]


def test_the_correctness_rule_reads_one_named_value_or_the_total():
    by_format = RewardFunctionVerifier(
        [graded_accuracy, half_format], correct_if="half_format", threshold=0.5
    )
    assert [x.correct for x in by_format.verify_batch(["<answer>9</answer>", "7"], TRL_ROWS[:2])] == [
        True,
        False,
    ]
    by_total = RewardFunctionVerifier([graded_accuracy, half_format], correct_if="total", threshold=1.5)
    assert [x.correct for x in by_total.verify_batch(["<answer>2</answer>", "2"], TRL_ROWS[:2])] == [
        True,
        False,
    ]
    with pytest.raises(ValueError, match="correct_if must be one of"):
        RewardFunctionVerifier([graded_accuracy], correct_if="accuracy")


def test_all_none_is_no_reward_and_a_weight_per_function_is_required():
    v = RewardFunctionVerifier(half_format)
    (verdict,) = v.verify_batch(["no tags"], TRL_ROWS[:1])
    assert verdict.reward is None and verdict.reason == "no_reward" and not verdict.correct
    with pytest.raises(ValueError, match="2 values for 1 reward functions"):
        RewardFunctionVerifier(half_format, reward_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="not both"):
        RewardFunctionVerifier(half_format, function=half_format)


def test_the_solution_column_reaches_the_function_without_any_mapping():
    CALLS.clear()
    v = RewardFunctionVerifier("test_reward_function.accuracy")  # answer_column left at its default
    verdicts = v.verify_batch(["<answer>2</answer>", "<answer>4</answer>", "x"], TRL_ROWS)
    (call,) = CALLS
    assert call["solution"] == ["2", "4", "6"] and call["level"] == [1, 2, 3]
    assert [x.correct for x in verdicts] == [True, True, False]


def test_conversational_problems_get_message_lists_as_trl_passes_them():
    seen = {}

    def grab(prompts, completions, **kwargs):
        seen.update(prompts=prompts, completions=completions)
        return [1.0] * len(completions)

    chat = Problem.from_messages(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1"}]
    )
    RewardFunctionVerifier(grab).verify_batch(["<answer>2</answer>"], [chat])
    assert seen["prompts"] == [chat.messages]
    assert seen["completions"] == [[{"role": "assistant", "content": "<answer>2</answer>"}]]


def test_a_missing_or_empty_column_is_refused_at_start_naming_it():
    v = RewardFunctionVerifier([graded_accuracy, half_format])
    with pytest.raises(ValueError, match=r"graded_accuracy needs the column 'solution', which is no column"):
        v.check_problems([Problem("1+1", "2", {"level": 1})])
    with pytest.raises(ValueError, match=r"'solution', which is None in every row"):
        v.check_problems([Problem("1+1", None, {"solution": None})])
    v.check_problems(TRL_ROWS)  # every column there: no error


def test_a_graded_verifier_beside_a_reward_that_pays_only_c_is_refused():
    from agon_lightning.game.rewards import CompetitiveReward, GradedReward
    from agon_lightning.training.module import AgonModule

    graded = RewardFunctionVerifier([graded_accuracy, half_format])
    with pytest.raises(ValueError, match="--model.reward=graded"):
        AgonModule(verifier=graded, reward=CompetitiveReward())
    AgonModule(verifier=graded, reward=GradedReward())  # accepted
    AgonModule(
        verifier=RewardFunctionVerifier(graded_accuracy), reward=CompetitiveReward()
    )  # one 0/1 function


def test_each_function_is_logged_by_name_mean_and_std_as_trl_logs_it():
    from agon_lightning.game.types import Verdict
    from agon_lightning.training.step_metrics import function_metrics

    verdicts = [
        Verdict(True, rewards={"acc": 1.0, "fmt": None}),
        Verdict(False, rewards={"acc": 0.0, "fmt": 0.5}),
    ]
    # TRL's nanstd has Bessel's correction: [1, 0] has std sqrt(0.5); one value has none (0 here, NaN in TRL).
    assert function_metrics("reward/", verdicts) == pytest.approx({
        "reward/acc/mean": 0.5, "reward/acc/std": 0.5**0.5, "reward/fmt/mean": 0.5, "reward/fmt/std": 0.0,
        "reward/acc/none_share": 0.0, "reward/fmt/none_share": 0.5,
    })  # fmt: skip
    three = [Verdict(True, rewards={"acc": x}) for x in (0.0, 0.5, 1.0)]  # deviations -0.5, 0, 0.5
    assert function_metrics("challenge_reward/", three) == pytest.approx({
        "challenge_reward/acc/mean": 0.5, "challenge_reward/acc/std": 0.5,  # sqrt(0.5 / (3 - 1))
        "challenge_reward/acc/none_share": 0.0,
    })  # fmt: skip


def test_a_problem_is_graded_when_it_has_every_column_the_functions_require():
    v = RewardFunctionVerifier([graded_accuracy, half_format])
    assert v.grades(TRL_ROWS[0])  # no gold answer needed: the solution column is there
    assert not v.grades(Problem("1+1"))  # a bare question at deployment: left ungraded, not a failing call
    assert not v.grades(Problem("1+1", None, {"solution": None}))
    assert RewardFunctionVerifier(half_format).grades(Problem("1+1"))  # needs no column


def test_one_graded_function_beside_a_reward_that_pays_only_c_is_told_once():
    import torch

    from agon_lightning.game.rewards import CompetitiveReward, GradedReward, RoleOutcome
    from agon_lightning.training.module import AgonModule

    def outcome(*graded):
        n = len(graded)
        return RoleOutcome(torch.zeros(n), torch.ones(n), ["x"] * n, torch.tensor(graded))

    module = AgonModule(verifier=RewardFunctionVerifier(graded_accuracy), reward=CompetitiveReward())
    paid = AgonModule(verifier=RewardFunctionVerifier(graded_accuracy), reward=GradedReward())
    module.tell_if_cut(outcome(1.0, 0.0, float("nan")))  # 0/1 values: c is the whole reward, nothing to say
    told = r"returned 0.7, not 0 or 1.*\(c = graded_accuracy >= 1\).*--model.reward=graded"
    with pytest.warns(UserWarning, match=told):
        module.tell_if_cut(outcome(1.0, 0.7))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.tell_if_cut(outcome(0.3))  # said once
        paid.tell_if_cut(outcome(0.3))  # a graded reward pays the value: nothing cut
