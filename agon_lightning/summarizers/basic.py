"""The built-in summarizers: the paper's post-reasoning summary, and two ablations.

- ``StripTraceSummarizer``: the text after the reasoning trace with the final answer cut
  out. The challenger sees *how* the drafter summarised its work, never its raw thinking
  or its answer, so it cannot simply copy.
- ``FullSummarizer``: the whole draft, trace included (an ablation: maximal exchange).
- ``HiddenSummarizer``: nothing (the paper's "competition without visible exchange").

No summary holds the draft's final answer: besides the answer block, every further
whole-token occurrence of the answer the draft gives is masked (:func:`~agon_lightning.text.mask_answer`).
"""

from __future__ import annotations

from agon_lightning.summarizers.base import Summarizer
from agon_lightning.text import ANSWER_MASK, after_thinking, extract_answer, mask_answer, remove_final_answer
from agon_lightning.types import Problem


class StripTraceSummarizer(Summarizer):
    """Everything after the last ``</think>``, minus the final-answer span.

    Args:
        max_chars: Truncate summaries longer than this (0 = no limit).
        empty_text: What the challenger reads when there is no summary (a draft cut off
            inside its trace, or one with nothing after it).
        mask: What replaces each further occurrence of the draft's final answer.
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
        if tail is None:
            return self.empty_text
        summary = mask_answer(remove_final_answer(tail), extract_answer(draft), self.mask)
        if self.max_chars:
            summary = summary[: self.max_chars]
        return summary or self.empty_text


class FullSummarizer(Summarizer):
    """The whole draft, trace included, with its final answer masked wherever it appears.

    Args:
        mask: What replaces each occurrence of the draft's final answer.
    """

    def __init__(self, mask: str = ANSWER_MASK) -> None:
        self.mask = mask

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        return mask_answer(draft.strip(), extract_answer(draft), self.mask)


class HiddenSummarizer(Summarizer):
    """The challenger sees nothing of the draft.

    Args:
        placeholder: The text put where the summary would be.
    """

    def __init__(self, placeholder: str = "") -> None:
        self.placeholder = placeholder

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        return self.placeholder
