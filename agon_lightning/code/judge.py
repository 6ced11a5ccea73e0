"""Pure helpers for judging code: find the program in a completion, compare outputs.

Output comparison follows DeepMind's CodeContests evaluation: outputs are sequences of
whitespace-separated tokens, compared case-insensitively, and two numeric tokens match when
they are within ``1e-5`` of each other. One deliberate deviation: when *both* tokens are
integers they must be equal exactly, because doubles cannot tell large integers apart
(``10**17`` and ``10**17 + 1`` are the same double) and contest answers are often that large.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from agon_lightning.game.text import PYTHON_LANGUAGES, after_thinking, code_blocks

_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")  # what ``float`` reads, minus nan/inf/_
BLOCK_CHOICES = ("last", "first", "longest")


def find_program(
    text: str, languages: Sequence[str] = PYTHON_LANGUAGES, block: str = "last"
) -> tuple[int, int, str] | None:
    """``(start, end, body)`` of the fenced block that holds the program (see :func:`~agon_lightning.game.text.code_blocks`).

    Args:
        text: Where to look.
        languages: Fence languages that count as the program.
        block: Which non-empty block to take when there are several: ``"last"`` (the final
            answer), ``"first"`` or ``"longest"``.
    """
    if block not in BLOCK_CHOICES:
        raise ValueError(f"block must be one of {BLOCK_CHOICES}, got {block!r}")
    blocks = [found for found in code_blocks(text, languages) if found[2].strip()]
    if not blocks:
        return None
    if block == "longest":
        return max(blocks, key=lambda found: len(found[2]))
    return blocks[0] if block == "first" else blocks[-1]


def extract_program(
    completion: str,
    languages: Sequence[str] = PYTHON_LANGUAGES,
    block: str = "last",
    search_thinking: bool = False,
) -> str | None:
    """The program a completion submits, or ``None`` when it has none.

    Only the text after the ``<think>`` trace is searched unless ``search_thinking``; a
    completion cut off inside its trace has no program.
    """
    text = completion if search_thinking else after_thinking(completion)
    found = None if text is None else find_program(text, languages, block)
    return None if found is None else found[2]


def tokens_match(expected: str, actual: str, tolerance: float = 1e-5) -> bool:
    """Whether two tokens match: integers exactly, other numbers within ``tolerance``, text case-insensitively."""
    if expected.lower() == actual.lower():
        return True
    if _INTEGER.fullmatch(expected) and _INTEGER.fullmatch(actual):
        return int(expected) == int(actual)
    if not (_NUMBER.fullmatch(expected) and _NUMBER.fullmatch(actual)):
        return False
    a, b = float(expected), float(actual)
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tolerance


def outputs_match(expected: str, actual: str, tolerance: float = 1e-5) -> bool:
    """Whether a program's output matches the expected output, token by token."""
    want, got = expected.split(), actual.split()
    return len(want) == len(got) and all(tokens_match(w, g, tolerance) for w, g in zip(want, got))
