"""What a challenger reads of a code draft: the approach, without the program.

The game shows the challenger the drafter's post-reasoning summary with the final answer
removed; for code, the final answer is the program. Handing over the program would turn the
challenge into copy-and-resubmit, so by default the summary is the prose after the ``<think>``
trace with the submitted block cut out (or every code block, or none, as configured).
"""

from __future__ import annotations

import re

from agon_lightning.code.judge import BLOCK_CHOICES, PYTHON_LANGUAGES, code_blocks, find_program
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.text import after_thinking
from agon_lightning.types import Problem

REMOVE_CHOICES = ("program", "all_code", "none")
_OPEN_FENCE = re.compile(r"^[ \t]*`{3,}", re.MULTILINE)


def cut_unclosed_fence(text: str) -> str:
    """``text`` up to a fence that never closes (a draft cut off mid-program)."""
    fences = list(_OPEN_FENCE.finditer(text))
    return text[: fences[-1].start()] if len(fences) % 2 else text


class CodeSummarizer(Summarizer):
    """The draft's approach without its program.

    Args:
        remove: ``"program"`` cuts the block the verifier would run; ``"all_code"`` cuts every
            fenced block (any language); ``"none"`` keeps them (an ablation: the challenger
            then sees the drafter's code).
        languages: Fence languages that hold the program (as for the code verifier).
        block: Which block is the program: ``"last"``, ``"first"`` or ``"longest"``.
        placeholder: Text left where a block was cut (``""`` leaves nothing).
        max_chars: Keep at most this many characters of the summary (0 = no limit).
        empty_text: What the challenger reads when there is no summary (a draft cut off
            inside its trace, or one that was nothing but its program).
    """

    def __init__(
        self,
        remove: str = "program",
        languages: list[str] | None = None,
        block: str = "last",
        placeholder: str = "",
        max_chars: int = 0,
        empty_text: str = "",
    ) -> None:
        if remove not in REMOVE_CHOICES:
            raise ValueError(f"remove must be one of {REMOVE_CHOICES}, got {remove!r}")
        if block not in BLOCK_CHOICES:
            raise ValueError(f"block must be one of {BLOCK_CHOICES}, got {block!r}")
        if max_chars < 0:
            raise ValueError(f"max_chars must be >= 0, got {max_chars}")
        self.remove = remove
        self.languages = list(PYTHON_LANGUAGES) if languages is None else languages
        self.block = block
        self.placeholder = placeholder
        self.max_chars = max_chars
        self.empty_text = empty_text

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        text = after_thinking(draft)
        if text is None:  # cut off inside its reasoning: no summary to give
            return self.empty_text
        if self.remove == "program":
            found = find_program(text, self.languages, self.block)
            spans = [] if found is None else [found[:2]]
        elif self.remove == "all_code":
            spans = [block[:2] for block in code_blocks(text, languages=None)]
        else:
            spans = []
        for start, end in reversed(spans):
            text = text[:start] + self.placeholder + text[end:]
        if self.remove != "none":
            text = cut_unclosed_fence(text)  # a draft cut off mid-program keeps its prose only
        text = re.sub(r"\n{3,}", "\n\n", text).strip()
        if self.max_chars:
            text = text[: self.max_chars]
        return text or self.empty_text
