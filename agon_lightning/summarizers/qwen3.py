"""The post-reasoning summary of a Qwen3 thinking-mode draft, answer removed.

Qwen3 in thinking mode writes ``<think>`` trace ``</think>`` and then a short write-up of
its solution that ends in ``\\boxed{answer}``. That write-up is what the paper's challenger
reads. Three things make Qwen3 drafts differ from the generic case:

- thinking-only checkpoints put ``<think>`` in the prompt, so a draft may close a trace it
  never opened; the summary is still what follows the last ``</think>``;
- a draft with no ``</think>`` at all was cut off (or went astray) inside its trace: every
  word of it is raw thinking, so there is no summary to give;
- write-ups often restate the boxed answer, or box several parts of it: every
  ``\\boxed{…}`` is cut out (brace-balanced), as is an unclosed ``\\boxed{`` at the end of
  a draft cut off mid-answer, and the final answer is masked wherever the prose restates it
  ("so the answer is 12."), so the challenger cannot copy the answer.
"""

from __future__ import annotations

import re

from agon_lightning.summarizers.base import Summarizer
from agon_lightning.text import ANSWER_MASK, THINK_CLOSE, after_thinking, last_boxed_span, mask_answer
from agon_lightning.types import Problem

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Math delimiters left with nothing inside once their box is gone: ``$$``, ``\[ \]``, ``\( \)``.
_EMPTY_MATH = re.compile(r"\$\$\s*\$\$|\$\s*\$|\\\[\s*\\\]|\\\(\s*\\\)")
_BLANK_LINES = re.compile(r"\n{3,}")


def remove_boxed(text: str) -> str:
    """``text`` without any ``\\boxed{…}``/``\\fbox{…}``; an unclosed one is cut to the end."""
    # Each pass only shortens the text; repeat until nothing changes, since dropping an empty
    # ``$$`` can join the halves of a new ``\boxed{``.
    while True:
        span = last_boxed_span(text)
        unclosed = _BOX_OPEN.search(text) if span is None else None
        if span is not None:
            text = text[: span[0]] + text[span[1] :]
        elif unclosed is not None:
            text = text[: unclosed.start()]
        else:
            cleaned = _EMPTY_MATH.sub("", text)
            if cleaned == text:
                return _BLANK_LINES.sub("\n\n", text).strip()
            text = cleaned


class Qwen3Summarizer(Summarizer):
    """The text after the last ``</think>``, every boxed answer removed.

    Args:
        require_thinking: A draft without ``</think>`` has no summary (thinking mode). Turn
            off for non-thinking mode, where a draft with no reasoning tags is all write-up
            (a draft that opened ``<think>`` without closing it still has no summary).
        empty_text: What the challenger reads when there is no summary.
        mask: What replaces each restatement of the final (last boxed) answer.
    """

    def __init__(self, require_thinking: bool = True, empty_text: str = "", mask: str = ANSWER_MASK) -> None:
        self.require_thinking = require_thinking
        self.empty_text = empty_text
        self.mask = mask

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        closed = THINK_CLOSE in draft
        # Without a closed trace, a draft that hit the token budget cannot be told apart from
        # raw thinking, so it is never shown.
        if not closed and (self.require_thinking or truncated):
            return self.empty_text
        tail = after_thinking(draft)
        if tail is None:
            return self.empty_text
        span = last_boxed_span(tail)
        answer = span[2].strip() if span is not None else None
        return mask_answer(remove_boxed(tail), answer, self.mask) or self.empty_text
