import pytest

from agon_lightning.data.reasoning_gym import generate_problems
from agon_lightning.game.types import Problem
from agon_lightning.verifiers.exact import ExactMatchVerifier
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier


def test_exact_match():
    v = ExactMatchVerifier()
    p = Problem("q", "-56")
    assert v.verify("<think>1</think>s<answer> -56 </answer>", p).correct
    wrong = v.verify("<think>1</think>s<answer>-55</answer>", p)
    assert not wrong.correct and wrong.reason == "wrong_answer" and wrong.extracted == "-55"
    assert v.verify("<think>no end", p).reason == "no_answer"
    assert v.verify("\\boxed{-56}", p).correct


def test_exact_match_needs_gold():
    with pytest.raises(ValueError, match="gold answer"):
        ExactMatchVerifier().verify("x", Problem("q"))


def test_reasoning_gym_scores_are_thresholded():
    (p,) = generate_problems({"chain_sum": {}}, 1, seed=3)
    v = ReasoningGymVerifier()
    right = v.verify(f"<answer>{p.answer}</answer>", p)
    assert right.correct and right.score == 1.0
    wrong = v.verify(f"<answer>{int(p.answer) + 1}</answer>", p)
    assert not wrong.correct and wrong.score < 1.0
    batch = v.verify_batch(["<answer>x</answer>", f"<answer>{p.answer}</answer>"], [p, p])
    assert [b.correct for b in batch] == [False, True]


def test_reasoning_gym_threshold_validation():
    with pytest.raises(ValueError, match="threshold"):
        ReasoningGymVerifier(threshold=0)
