"""The control summarizer that shows a challenger another problem's summary (summarizers/other.py)."""

from __future__ import annotations

import pytest

from agon_lightning.game.types import Problem
from agon_lightning.summarizers.other import OtherProblemSummarizer
from agon_lightning.testbeds.countdown.summarizer import CountdownSummarizer


def problem(numbers: list[int], target: int) -> Problem:
    entry = {"metadata": {"numbers": numbers, "target": target}}
    return Problem(
        f"Make {target} from {' '.join(map(str, sorted(numbers)))}", "", {"task": "countdown", "entry": entry}
    )


def draft(summary: str, answer: str) -> str:
    return f"<think>x</think>{summary}<answer>{answer}</answer>"


def test_each_challenger_reads_the_latest_summary_of_another_problem() -> None:
    s = OtherProblemSummarizer(CountdownSummarizer())
    a, b = problem([3, 8, 9], 35), problem([2, 5, 7], 45)
    assert s.summarize(draft("9*3=27, left 27 8 -> 35", "9*3+8"), a) == ""  # nobody before it
    assert s.summarize(draft("9*3=27, left 27 8 -> 35", "9*3+8"), a) == ""  # its own is never shown
    assert s.summarize(draft("7*5=35, left 35 2 -> 37", "7*5+2"), b) == "9*3=27, left 27 8 -> 35"
    assert s.summarize(draft("9*8=72, left 72 3 -> 75", "9*8+3"), a) == "7*5=35, left 35 2 -> 37"
    assert s.summarize(draft("7+2=9, left 9 5 -> 45", "(7+2)*5"), b) == "9*8=72, left 72 3 -> 75"


def test_the_shown_summary_is_hidden_against_the_problem_answered() -> None:
    s = OtherProblemSummarizer(CountdownSummarizer())
    s.summarize(draft("9*3=27, 27+8=35, left 35 -> 35", "9*3+8"), problem([3, 8, 9, 4], 35))
    shown = s.summarize(draft("x", "1"), problem([3, 8, 9], 35))
    assert "27+8" not in shown and "?" in shown  # 9*3=27 then 27+8 would use all of 3 8 9


def test_bad_memory_is_refused() -> None:
    with pytest.raises(ValueError, match="remember must be >= 2.*got 1"):
        OtherProblemSummarizer(CountdownSummarizer(), remember=1)
