"""Worked solutions: hand-computed chain_sum and basic_arithmetic traces, slips, errors."""

from __future__ import annotations

import random

import pytest

from agon_lightning.data.reasoning_gym import generate_problems
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem
from agon_lightning.summarizers.basic import StripTraceSummarizer
from agon_lightning.testbeds.chain_sum.traces import corrupted_completion, evaluate, target_completion


def arithmetic_problem(expression: str, answer: str, task: str = "chain_sum") -> Problem:
    """A problem shaped like generate_problems' output, without reasoning-gym."""
    entry = {"question": f"{expression} =", "answer": answer, "metadata": {"expression": expression}}
    return Problem(question=entry["question"], answer=answer, metadata={"task": task, "entry": entry})


@pytest.mark.parametrize(
    ("expression", "answer", "completion"),
    [
        ("42 - 25 - 73", "-56", "<think>42-25=17 17-73=-56</think>17<answer>-56</answer>"),
        ("57 + 87 + 70", "214", "<think>57+87=144 144+70=214</think>144<answer>214</answer>"),
        ("98 - 93 + 77 + 13", "95", "<think>98-93=5 5+77=82 82+13=95</think>5,82<answer>95</answer>"),
        ("20 - 56 - 31", "-67", "<think>20-56=-36 -36-31=-67</think>-36<answer>-67</answer>"),
        ("1 + 5", "6", "<think>1+5=6</think><answer>6</answer>"),
    ],
)
def test_chain_sum_traces_by_hand(expression: str, answer: str, completion: str) -> None:
    assert target_completion(arithmetic_problem(expression, answer)) == completion


@pytest.mark.parametrize(
    ("expression", "answer", "trace"),
    [
        ("-( 32 / 8 ) - 15", "-19", "32/8=4 -(4)=-4 -4-15=-19"),
        ("( 56 + -33 ) - 84", "-61", "56+-33=23 23-84=-61"),
        ("74 + -13 / 1", "61", "-13/1=-13 74+-13=61"),
        ("2 - -1", "3", "2--1=3"),
        ("7 * ( 3 - 5 )", "-14", "3-5=-2 7*-2=-14"),
    ],
)
def test_basic_arithmetic_traces_follow_precedence(expression: str, answer: str, trace: str) -> None:
    completion = target_completion(arithmetic_problem(expression, answer, task="basic_arithmetic"))
    assert completion.startswith(f"<think>{trace}</think>")
    assert extract_answer(completion) == answer


def test_generated_problems_reach_the_gold_answer() -> None:
    problems = generate_problems({"chain_sum": {}, "basic_arithmetic": {}}, 400, seed=7)
    for problem in problems:
        assert extract_answer(target_completion(problem)) == problem.answer


def test_summary_is_what_the_rival_reads() -> None:
    completion = target_completion(arithmetic_problem("42 - 25 - 73", "-56"))
    assert StripTraceSummarizer().summarize(completion, arithmetic_problem("42 - 25 - 73", "-56")) == "17"


def test_a_slip_carries_through_later_steps() -> None:
    steps, value = evaluate("42 - 25 - 73", slip_at=0, slip=1)
    assert [str(s) for s in steps] == ["42-25=18", "18-73=-55"]
    assert value == -55


def test_corrupted_drafts_are_wrong_and_seeded() -> None:
    problems = generate_problems({"chain_sum": {"min_terms": 2, "max_terms": 4}}, 100, seed=3)
    first = [corrupted_completion(p, random.Random(i)) for i, p in enumerate(problems)]
    again = [corrupted_completion(p, random.Random(i)) for i, p in enumerate(problems)]
    assert first == again
    # +/- chains cannot absorb a slip: every corrupted answer is wrong.
    assert all(extract_answer(text) != p.answer for text, p in zip(first, problems, strict=True))


def test_a_bare_number_has_no_steps() -> None:
    # Python's parser reads -( 5 ) as the literal -5: no step, as for -5.
    assert target_completion(arithmetic_problem("-( 5 )", "-5", "basic_arithmetic")) == (
        "<think></think><answer>-5</answer>"
    )
    assert target_completion(arithmetic_problem("12", "12")) == "<think></think><answer>12</answer>"


def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="supported tasks: basic_arithmetic, chain_sum"):
        target_completion(Problem("Sort these words", "a b", {"task": "word_sorting", "entry": {}}))
    with pytest.raises(ValueError, match="the gold answer is 5"):
        target_completion(arithmetic_problem("1 + 1", "5"))
    with pytest.raises(ValueError, match="only integers"):
        evaluate("2 ** 3")
    with pytest.raises(ValueError, match="division by zero"):
        evaluate("4 / ( 2 - 2 )")
