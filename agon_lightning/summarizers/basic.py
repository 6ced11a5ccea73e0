"""The built-in summarizers: the paper's post-reasoning summary, and two ablations.

- ``StripTraceSummarizer``: the text after the reasoning trace with the answer cut out. The
  challenger sees *how* the drafter summarised its work, never its raw thinking or its
  answer, so it cannot simply copy.
- ``FullSummarizer``: the whole draft, trace included, answer cut out (an ablation: maximal
  exchange).
- ``HiddenSummarizer``: nothing (the paper's "competition without visible exchange").

What counts as the answer, and what is masked besides, is one rule for every summarizer
(:mod:`agon_lightning.summarizers.hiding`): every answer span the draft has (each
``<answer>`` block and ``\\boxed{}``, finished or left open) is cut, every token that
normalises to one of their contents (``114.0``, ``+114``, ``\\frac{228}{2}`` for ``114``) reads
``?``, and a draft that states no answer after its trace has no summary at all.
"""

from __future__ import annotations

from agon_lightning.game.text import after_thinking
from agon_lightning.game.types import Problem
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.summarizers.hiding import ANSWER_MASK, hide_answers


class StripTraceSummarizer(Summarizer):
    """Everything after the last ``</think>``, every answer span cut, restatements masked.

    Args:
        max_chars: Truncate summaries longer than this (0 = no limit).
        empty_text: What the challenger reads when there is no summary (a draft cut off
            inside its trace, one that states no answer, or one with nothing besides it).
        mask: What replaces each restatement of an answer the draft gives.
    """

    def __init__(self, max_chars: int = 0, empty_text: str = "", mask: str = ANSWER_MASK) -> None:
        if max_chars < 0:
            raise ValueError(f"max_chars must be >= 0, got {max_chars}")
        self.max_chars = max_chars
        self.empty_text = empty_text
        self.mask = mask

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        tail = after_thinking(draft)
        # A trace still open at the end was cut off: there is no post-reasoning summary.
        summary = None if tail is None else hide_answers(tail, draft, self.mask, self.max_chars)
        return summary or self.empty_text


class FullSummarizer(Summarizer):
    """The whole draft, trace included, every answer span cut and restatements masked.

    Args:
        mask: What replaces each restatement of an answer the draft gives.
    """

    def __init__(self, mask: str = ANSWER_MASK) -> None:
        self.mask = mask

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        return hide_answers(draft, draft, self.mask) or ""


class HiddenSummarizer(Summarizer):
    """The challenger sees nothing of the draft.

    Args:
        placeholder: The text put where the summary would be.
    """

    def __init__(self, placeholder: str = "") -> None:
        self.placeholder = placeholder

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        return self.placeholder
