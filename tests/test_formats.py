"""φ, the format check: which completions have the shape, for each kind of answer and template."""

import pytest

from agon_lightning.cli.registry import load_plugins
from agon_lightning.game.formats import FormatCheck, ThinkAnswerFormat

FENCE = "`" * 3

CASES = [
    # (answer, trace opened by the prompt, completion, φ)
    ("tag", False, "<think>42-25=17 17-73=-56</think>17,-56<answer>-26</answer>", 1.0),  # the tiny model's
    ("tag", False, "\n <think>a</think><answer>1</answer>\n", 1.0),
    ("tag", False, "<think>a</think>b<answer>1", 0.0),  # answer block left open
    ("tag", False, "<think>a</think><answer>1</answer><answer>2</answer>", 0.0),  # two answers
    ("tag", False, "<think>a</think><answer> </answer>", 0.0),  # empty answer
    ("tag", False, "<think>a</think>b</answer>x<answer>", 0.0),  # tags out of order
    ("tag", False, "<think>a</think>b", 0.0),  # no answer
    ("tag", False, "<think>a b c", 0.0),  # cut off inside the trace
    ("tag", False, "a</think><answer>1</answer>", 0.0),  # the completion never opened its trace
    ("tag", False, "x<think>a</think><answer>1</answer>", 0.0),  # text before the trace
    ("tag", False, "<think>a<think>b</think><answer>1</answer>", 0.0),
    ("tag", False, "<think>a</think>b</think><answer>1</answer>", 0.0),
    ("tag", False, "<answer>1</answer>", 0.0),  # no trace at all
    ("tag", True, "a</think>b<answer>1</answer>", 1.0),  # Qwen3: the prompt opened <think>
    ("tag", True, "<think>a</think>b<answer>1</answer>", 0.0),
    ("boxed", True, "a</think>So the answer is \\boxed{\\frac{1}{2}}.", 1.0),
    ("boxed", True, "a</think>\\boxed{}", 0.0),
    ("boxed", True, "a</think>\\boxed{12", 0.0),
    ("boxed", True, "a \\boxed{3}</think>no box here", 0.0),  # a box inside the trace does not count
    ("code", False, f"<think>a</think>Approach.\n{FENCE}python\nprint(1)\n{FENCE}\n", 1.0),
    ("code", False, f"<think>a</think>{FENCE}python\nprint(1)\n", 0.0),  # fence never closed
    ("code", False, f"<think>a</think>{FENCE}\n\n{FENCE}\n", 0.0),  # empty program
]


@pytest.mark.parametrize("answer,opened,completion,expected", CASES)
def test_think_answer_format_on_a_table_of_completions(answer, opened, completion, expected):
    check = ThinkAnswerFormat(answer=answer, trace_opened_by_prompt=opened)
    assert check.score(completion) == expected


def test_bad_answer_kind_is_named():
    with pytest.raises(ValueError, match="answer must be one of .*'latex'"):
        ThinkAnswerFormat(answer="latex")


def test_format_checks_register_through_their_entry_point_group():
    found = load_plugins()["agon_lightning.formats"]
    assert found["think_answer"] is ThinkAnswerFormat and issubclass(ThinkAnswerFormat, FormatCheck)
