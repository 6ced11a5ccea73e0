import pytest

from agon_lightning.game.text import (
    after_thinking,
    answer_spans,
    extract_answer,
    last_boxed_span,
    thinking_part,
)
from agon_lightning.game.types import Problem
from agon_lightning.summarizers.basic import FullSummarizer, HiddenSummarizer, StripTraceSummarizer
from agon_lightning.summarizers.code import CodeSummarizer

P = Problem("1+1=?", "2")


@pytest.mark.parametrize(
    "draft,summary",
    [
        ("<think>1+1=2</think>partial 2<answer>2</answer>", "partial ?"),  # the answer, restated: masked
        (
            "<think>1+1=2</think>so 12, 2.5, x2<answer>2</answer>",
            "so 12, 2.5, x2",
        ),  # inside other tokens: kept
        ("<think>a</think><think>b</think>final note \\boxed{7}", "final note"),
        ("no opening tag</think>sum is 3 <answer>3</answer>", "sum is ?"),  # thinking-only checkpoint
        ("<think>cut off in the middle", ""),  # truncated inside the trace: no summary
        ("plain answer <answer>4</answer>", "plain answer"),
        ("<think>x</think>no answer given", ""),  # states no answer: no summary
        ("<think>x</think>box \\boxed{\\frac{1}{2}} done", "box  done"),
    ],
)
def test_strip_trace(draft, summary):
    assert StripTraceSummarizer().summarize(draft, P) == summary


def test_strip_trace_placeholder_and_limit():
    s = StripTraceSummarizer(max_chars=3, empty_text="(none)")
    assert s.summarize("<think>never closed", P, truncated=True) == "(none)"
    assert s.summarize("<think>x</think>abcdef<answer>1</answer>", P) == "abc"


def test_full_and_hidden():
    draft = "<think>x</think>y<answer>1</answer>"
    assert FullSummarizer().summarize(draft, P) == "<think>x</think>y"
    assert FullSummarizer().summarize("<think>x 1</think>y, no answer", P) == ""
    assert HiddenSummarizer().summarize(draft, P) == ""
    assert HiddenSummarizer("[hidden]").summarize(draft, P) == "[hidden]"


def test_extract_answer_prefers_last_after_trace():
    assert extract_answer("<think><answer>1</answer></think>x<answer>2</answer> <answer>3</answer>") == "3"
    assert extract_answer("<think>\\boxed{5}") is None
    assert extract_answer("so \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert extract_answer("nothing here") is None


def test_boxed_span_is_brace_balanced_and_tolerates_garbage():
    text = "a \\boxed{x^{2}} b \\boxed{{y}"
    assert last_boxed_span(text)[2] == "x^{2}"
    assert last_boxed_span("\\boxed{") is None


def test_thinking_parts():
    assert after_thinking("<think>a</think>b") == "b"
    assert after_thinking("<think>a") is None
    assert thinking_part("<think>a b</think>c") == "a b"
    assert thinking_part("<think>open") == "open"


def spans(text: str) -> list[str]:
    return [text[s.inner_start : s.inner_end] for s in answer_spans(text)]


def test_answer_spans_find_every_answer_finished_or_not():
    assert spans("a<answer>1</answer>b<answer>2</answer>") == ["1", "2"]
    assert spans("a<answer>1") == ["1"]  # left open: to the end
    assert spans("1,2</answer>x") == ["1,2"]  # closes a block opened before the text began
    assert spans("<answer>a<answer>b</answer>") == ["a<answer>b</answer>", "b"]  # nested: both
    assert spans("\\boxed{x^{2}} and \\fbox {3} and \\boxed{4") == ["x^{2}", "3", "4"]
    assert spans("<answer>\\boxed{5}</answer>") == ["\\boxed{5}", "5"]
    assert spans("no answer here") == []
    assert len(answer_spans("\\boxed{" * 5000)) == 5000  # degenerate input stays linear


TWO_PROGRAMS = (
    "</think>Try brute force:\n```python\nprint(1)\n```\nBetter, in O(1):\n```py\nprint(2)\n```\n"
    "The key line is\nprint(2)\n```text\nsample output\n```"
)


def test_code_summary_cuts_every_program_and_its_restated_lines():
    assert CodeSummarizer().summarize(TWO_PROGRAMS, P) == (
        "Try brute force:\n\nBetter, in O(1):\n\nThe key line is\n```text\nsample output\n```"
    )
    assert (
        CodeSummarizer().summarize("</think>Greedy, then print the count.", P) == ""
    )  # no program: no summary
    assert (
        CodeSummarizer().summarize("</think>Greedy.\n```python\n", P) == ""
    )  # cut off before its first line
    assert CodeSummarizer(remove="none").summarize("</think>Greedy, no program.", P) == "Greedy, no program."
