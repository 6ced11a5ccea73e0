"""Qwen3Summarizer: the write-up after the trace, with no answer and no raw thinking in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agon_lightning.game.types import Problem
from agon_lightning.summarizers.hiding import mask_answers, readings
from agon_lightning.summarizers.qwen3 import Qwen3Summarizer, drop_empty_math

FIXTURE = Path(__file__).parent / "fixtures" / "deepmath_fixture.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
P = Problem("q", "\\frac{1}{2}")
SUMMARY = "Integrating $x$ from 0 to 1 gives $\\tfrac{x^2}{2}$ at 1."
TRACE = "<think>\nThe antiderivative is x^2/2, so maybe \\boxed{1/2}.\n</think>"
DRAFT = f"{TRACE}\n\n{SUMMARY}\n\n\\[\n\\boxed{{\\frac{{1}}{{2}}}}\n\\]"


@pytest.mark.parametrize(
    "draft,summary",
    [
        (DRAFT, SUMMARY),
        (DRAFT.removeprefix("<think>"), SUMMARY),  # thinking-only checkpoint: <think> was in the prompt
        ("<think>a</think>old <think>b</think>\n\nnew write-up $\\boxed{2}$.", "new write-up ."),
        (
            "<think>x</think>First $\\boxed{1}$, corrected: $$\\boxed{\\dfrac{1}{2}}$$ done.",
            "First , corrected: done.",
        ),
        ("<think>x</think>Parts: (a) \\boxed{3} and (b) \\fbox{4}.", "Parts: (a) and (b) ."),
        (
            "<think>x</think>It is $3$, then $4$: <answer>7</answer>",
            "It is $3$, then $4$:",
        ),  # the paper's tag
        ("<think>x</think>So the answer is \\boxed{\\frac{1}{", "So the answer is"),  # cut off mid-answer
        ("<think>x</think>\\(\\boxed{7}\\)\n\n\n\nEnd.", "End."),
    ],
)
def test_summary_is_the_write_up_without_any_box(draft, summary):
    assert Qwen3Summarizer().summarize(draft, P) == summary


@pytest.mark.parametrize("truncated", [False, True])
@pytest.mark.parametrize(
    "draft",
    [
        "<think>\nI am still working on \\boxed{1/2}",  # cut off inside the trace
        "The antiderivative is x^2/2, so \\boxed{1/2}",  # thinking-only checkpoint, cut off: all trace
        "",
    ],
)
def test_no_closed_trace_means_no_summary(draft, truncated):
    assert Qwen3Summarizer().summarize(draft, P, truncated) == ""
    assert Qwen3Summarizer(empty_text="(no summary)").summarize(draft, P, truncated) == "(no summary)"


def test_non_thinking_mode_keeps_an_untagged_write_up_unless_cut_off():
    relaxed = Qwen3Summarizer(require_thinking=False)
    assert relaxed.summarize("Add them: $\\boxed{3}$.", P) == "Add them: ."
    assert relaxed.summarize("Add them: 1 + 2, and", P, truncated=True) == ""
    assert relaxed.summarize("<think>\nstill going", P) == ""
    assert relaxed.summarize(DRAFT, P, truncated=True) == SUMMARY


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["final_answer"])
def test_fixture_solutions_lose_trace_and_answer(row):
    draft = row["r1_solution_1"]
    summary = Qwen3Summarizer().summarize(draft, Problem(row["question"], row["final_answer"]))
    trace = draft.split("</think>")[0].removeprefix("<think>").strip()
    answer = row["final_answer"]
    assert summary and trace not in summary
    # The write-up as it was, except that each restatement of the answer reads "?".
    assert summary.replace("?", "") != "" and mask_answers(summary, readings(answer)) == summary
    assert "\\boxed" not in summary and "\\[" not in summary


@given(
    st.lists(
        st.sampled_from(["\\boxed{", "\\fbox {", "{", "}", "$", "$$", "\\[", "\\]", "x", "7", " ", "\n"])
    ).map("".join)
)
def test_no_box_survives_and_no_empty_math_is_left(text):
    summary = Qwen3Summarizer().summarize(f"<think>a</think>{text}<answer>7</answer>", P)
    assert "\\boxed" not in summary and "\\fbox" not in summary
    assert drop_empty_math(summary) == summary  # no empty delimiters left


@given(st.text(max_size=200), st.booleans())
def test_never_raises_and_never_shows_a_trace_end(draft, truncated):
    summary = Qwen3Summarizer().summarize(draft, P, truncated)
    assert "</think>" not in summary
