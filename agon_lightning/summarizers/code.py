"""What a challenger reads of a code draft: the approach, without the program.

The game shows the challenger the drafter's post-reasoning summary with the final answer
removed; for code, the final answer is the program. Handing it over would turn the challenge
into copy-and-resubmit, so the answer rule every summarizer follows
(:mod:`agon_lightning.summarizers.hiding`) reads here: the draft's answers are its program
blocks after the ``<think>`` trace — every fenced block the verifier could run (a fence in
``languages``; with ``remove="all_code"`` any fence), including one left open, which runs to
the end. Every one is cut, every line of one that the prose repeats goes too, and a draft with
no program block (not even one cut off) has no summary: no runnable copy of a program the
draft wrote is left for the challenger, only its prose.
"""

from __future__ import annotations

import re

from agon_lightning.game.text import PYTHON_LANGUAGES, after_thinking, code_blocks
from agon_lightning.game.types import Problem
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.summarizers.hiding import replace_spans

REMOVE_CHOICES = ("program", "all_code", "none")
_FENCE_LINE = re.compile(r"^[ \t]*`{3,}[ \t]*([^\s`]*)[^\n]*$", re.MULTILINE)


def program_spans(text: str, languages: list[str] | None) -> list[tuple[int, int, str]]:
    """``(start, end, body)`` of each fenced block of ``text`` in ``languages`` (``None``: any).

    A fence that no later fence closes opens a block that runs to the end of ``text`` (a draft
    cut off mid-program); it counts when its language does.
    """
    closed = code_blocks(text, languages=None)
    runnable = {block[:2] for block in code_blocks(text, languages)}
    spans = [block for block in closed if block[:2] in runnable]
    for fence in _FENCE_LINE.finditer(text):
        if not any(start <= fence.start() < end for start, end, _ in closed):
            wanted = languages is None or fence[1].lower() in {language.lower() for language in languages}
            if wanted:
                spans.append((fence.start(), len(text), text[fence.end() + 1 :]))
            break  # everything after an unclosed fence is inside it
    return spans


class CodeSummarizer(Summarizer):
    """The draft's approach without its program.

    Args:
        remove: ``"program"`` cuts every block the verifier could run (a fence in
            ``languages``); ``"all_code"`` cuts every fenced block (any language); ``"none"``
            keeps them (an ablation: the challenger then sees the drafter's code).
        languages: Fence languages that hold the program (as for the code verifier).
        placeholder: Text left where a block was cut (``""`` leaves nothing).
        max_chars: Keep at most this many characters of the summary (0 = no limit).
        empty_text: What the challenger reads when there is no summary (a draft cut off
            inside its trace, one with no program, or one that was nothing but its program).
    """

    def __init__(
        self,
        remove: str = "program",
        languages: list[str] | None = None,
        placeholder: str = "",
        max_chars: int = 0,
        empty_text: str = "",
    ) -> None:
        if remove not in REMOVE_CHOICES:
            raise ValueError(f"remove must be one of {REMOVE_CHOICES}, got {remove!r}")
        if max_chars < 0:
            raise ValueError(f"max_chars must be >= 0, got {max_chars}")
        self.remove = remove
        self.languages = list(PYTHON_LANGUAGES) if languages is None else languages
        self.placeholder = placeholder
        self.max_chars = max_chars
        self.empty_text = empty_text

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        text = after_thinking(draft)
        if text is None:  # cut off inside its reasoning: no summary to give
            return self.empty_text
        if self.remove != "none":
            text = self._without_programs(text)
        text = re.sub(r"\n{3,}", "\n\n", text or "").strip()
        if self.max_chars:
            text = text[: self.max_chars]
        return text or self.empty_text

    def _without_programs(self, text: str) -> str | None:
        """``text`` with every program block and each line of one restated cut (``None``: no program)."""
        languages = None if self.remove == "all_code" else self.languages
        spans = program_spans(text, languages)
        if not any(body.strip() for _, _, body in spans):
            return None
        lines: set[str] = set()
        # Cutting can leave fences that pair up anew: cut until none is left (each pass removes one).
        while spans:
            lines |= {line.strip() for _, _, body in spans for line in body.splitlines() if line.strip()}
            text = replace_spans(text, [span[:2] for span in spans], self.placeholder)
            spans = program_spans(text, languages)
        return "\n".join(line for line in text.split("\n") if line.strip() not in lines)
