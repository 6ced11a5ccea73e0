"""Pure string helpers shared by verifiers, summarizers and format checks.

Completions follow one shape: an optional ``<think>`` … ``</think>`` reasoning trace, then a
post-reasoning summary, then a final answer given as ``<answer>…</answer>`` or ``\\boxed{…}``,
or, for code, a program in a fenced block. These helpers cut that shape apart without ever
raising on malformed model output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def after_thinking(text: str) -> str | None:
    """Text after the last ``</think>``; the whole text when no ``<think>`` opened a trace.

    Returns ``None`` when a trace was opened but never closed (the draft was cut off inside
    its reasoning). A completion with ``</think>`` but no opening tag (thinking-only
    checkpoints put ``<think>`` in the prompt) is handled like a closed trace.
    """
    close = text.rfind(THINK_CLOSE)
    if close >= 0:
        return text[close + len(THINK_CLOSE) :]
    if THINK_OPEN in text:
        return None
    return text


def thinking_part(text: str) -> str:
    """The reasoning trace: everything before the last ``</think>`` (minus ``<think>``)."""
    close = text.rfind(THINK_CLOSE)
    head = text if close < 0 and THINK_OPEN in text else text[: max(close, 0)]
    start = head.find(THINK_OPEN)
    return head[start + len(THINK_OPEN) :] if start >= 0 else head


_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_TAG = re.compile(r"</?answer>")


def _brace_closers(text: str) -> dict[int, int]:
    """Index of each ``{`` → index of the ``}`` that closes it (unclosed ones are absent)."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closing[stack.pop()] = i
    return closing


def last_boxed_span(text: str) -> tuple[int, int, str] | None:
    """``(start, end, content)`` of the last brace-balanced ``\\boxed{…}`` (or ``\\fbox{…}``).

    ``text[start:end]`` is the whole ``\\boxed{…}`` span. Unbalanced braces → ``None``. One
    pass matches every brace, so adversarial text (thousands of unclosed boxes) stays linear.
    """
    starts = [(m.start(), m.end() - 1) for m in _BOX_OPEN.finditer(text)]
    if not starts:
        return None
    closing = _brace_closers(text)
    for start, open_brace in reversed(starts):
        end = closing.get(open_brace)
        if end is not None:
            return start, end + 1, text[open_brace + 1 : end]
    return None


def answer_tag_span(text: str) -> tuple[int, int, str] | None:
    """``(start, end, content)`` of the last ``<answer>…</answer>`` block."""
    matches = list(_ANSWER_TAG.finditer(text))
    if not matches:
        return None
    return matches[-1].start(), matches[-1].end(), matches[-1].group(1)


class AnswerSpan(NamedTuple):
    """Where a text states an answer: ``text[start:end]`` with its markup, ``text[inner_start:inner_end]`` without."""

    start: int
    end: int
    inner_start: int
    inner_end: int


def answer_spans(text: str) -> list[AnswerSpan]:
    """Every place where ``text`` states an answer, by start.

    These are every ``<answer>`` block and every ``\\boxed{}`` / ``\\fbox{}``, nested ones
    included, finished or not: a block or box left open runs to the end of the text, and a
    ``</answer>`` that closes nothing closes a block opened before the text began (as a
    ``</think>`` does for thinking-only checkpoints). Graders read the last finished one; a
    summary must hide them all. Linear in ``len(text)``.
    """
    spans: list[AnswerSpan] = []
    opened: list[tuple[int, int]] = []  # (start of the tag, start of its content)
    for tag in _TAG.finditer(text):
        if tag.group() == "<answer>":
            opened.append((tag.start(), tag.end()))
        else:
            start, inner = opened.pop() if opened else (0, 0)
            spans.append(AnswerSpan(start, tag.end(), inner, tag.start()))
    spans += [AnswerSpan(start, len(text), inner, len(text)) for start, inner in opened]
    closing = _brace_closers(text)
    for box in _BOX_OPEN.finditer(text):
        close = closing.get(box.end() - 1)
        end, inner_end = (len(text), len(text)) if close is None else (close + 1, close)
        spans.append(AnswerSpan(box.start(), end, box.end(), inner_end))
    return sorted(spans)


def extract_answer(text: str) -> str | None:
    """The final answer: the last ``<answer>`` block, else the last ``\\boxed{}``.

    Only the part after the reasoning trace is searched; a draft cut off inside its trace
    has no answer.
    """
    tail = after_thinking(text)
    if tail is None:
        return None
    for finder in (answer_tag_span, last_boxed_span):
        span = finder(tail)
        if span is not None:
            return span[2].strip()
    return None


def remove_final_answer(text: str) -> str:
    """``text`` with its final-answer span (``<answer>`` block or last ``\\boxed{}``) cut out."""
    for finder in (answer_tag_span, last_boxed_span):
        span = finder(text)
        if span is not None:
            return (text[: span[0]] + text[span[1] :]).strip()
    return text.strip()


# An opening fence (``` or longer, with an optional info string), the body, the same fence.
_FENCE = re.compile(r"^[ \t]*(`{3,})[ \t]*([^\s`]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE)
PYTHON_LANGUAGES = ("python", "python3", "py", "py3", "")


def code_blocks(text: str, languages: Sequence[str] | None = PYTHON_LANGUAGES) -> list[tuple[int, int, str]]:
    """``(start, end, body)`` of every closed fenced block whose language is in ``languages``.

    The language is the first word of the info string, lower-cased; ``""`` stands for a
    block without one, and ``languages=None`` accepts any. An unclosed fence (a completion
    cut off mid-program) is no block.
    """
    wanted = None if languages is None else {language.lower() for language in languages}
    return [
        (match.start(), match.end(), match.group(3))
        for match in _FENCE.finditer(text)
        if wanted is None or match.group(2).lower() in wanted
    ]
