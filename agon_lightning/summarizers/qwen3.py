"""The post-reasoning summary of a Qwen3 thinking-mode draft, answer removed.

Qwen3 in thinking mode writes ``<think>`` trace ``</think>`` and then a short write-up of
its solution that ends in its answer (``<answer>…</answer>`` when the prompt asks for it, as
the paper's does, else ``\\boxed{…}``). That write-up is what the paper's challenger reads.
Three things make Qwen3 drafts differ from the generic case:

- thinking-only checkpoints put ``<think>`` in the prompt, so a draft may close a trace it
  never opened; the summary is still what follows the last ``</think>``;
- a draft with no ``</think>`` at all was cut off (or went astray) inside its trace: every
  word of it is raw thinking, so there is no summary to give;
- write-ups restate the answer, box several parts of it, or wrap it in display math: the
  answer rule every summarizer follows (:mod:`agon_lightning.summarizers.hiding`) cuts every
  ``<answer>`` block and ``\\boxed{…}``, finished or not, masks every token that normalises to
  one of them ("so the answer is 12.0" → "so the answer is ?."), and gives no summary for a
  draft that states no answer; here the math delimiters a cut box leaves empty go too.
"""

from __future__ import annotations

import re

from agon_lightning.game.text import THINK_CLOSE, after_thinking
from agon_lightning.game.types import Problem
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.summarizers.hiding import ANSWER_MASK, hide_answers

# ``$…$`` / ``$$…$$`` pairs, left to right (an escaped ``\$`` is no delimiter), and ``\[ \]``, ``\( \)``.
_DOLLARS = re.compile(r"(?<!\\)\$\$(.*?)(?<!\\)\$\$|(?<!\\)\$(.*?)(?<!\\)\$", re.DOTALL)
_EMPTY_BRACKETS = re.compile(r"\\\[\s*\\\]|\\\(\s*\\\)")
_BLANK_LINES = re.compile(r"\n\s*\n(\s*\n)+")
_SPACES = re.compile(r"[ \t]{2,}")


def drop_empty_math(text: str) -> str:
    """``text`` without math delimiters left holding only whitespace, blank-line runs cut to one.

    Each empty pair becomes a space (never nothing: the pieces on either side must not join
    into a new token), then runs of spaces are collapsed.
    """
    while True:
        cleaned = _DOLLARS.sub(lambda m: " " if not (m[1] or m[2] or "").strip() else m[0], text)
        cleaned = _EMPTY_BRACKETS.sub(" ", cleaned)
        if cleaned == text:
            break
        text = cleaned
    return _SPACES.sub(" ", _BLANK_LINES.sub("\n\n", text)).strip()


class Qwen3Summarizer(Summarizer):
    """The text after the last ``</think>``, every answer removed.

    Args:
        require_thinking: A draft without ``</think>`` has no summary (thinking mode). Turn
            off for non-thinking mode, where a draft with no reasoning tags is all write-up
            (a draft that opened ``<think>`` without closing it still has no summary).
        empty_text: What the challenger reads when there is no summary.
        mask: What replaces each restatement of an answer the draft gives.
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
        summary = None if tail is None else hide_answers(tail, draft, self.mask)
        return drop_empty_math(summary or "") or self.empty_text
