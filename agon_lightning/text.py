"""Pure string helpers shared by verifiers and summarizers.

Completions follow one shape: an optional ``<think>`` … ``</think>`` reasoning trace, then a
post-reasoning summary, then a final answer given as ``<answer>…</answer>`` or ``\\boxed{…}``.
These helpers cut that shape apart without ever raising on malformed model output.
"""

from __future__ import annotations

import re

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


def last_boxed_span(text: str) -> tuple[int, int, str] | None:
    """``(start, end, content)`` of the last brace-balanced ``\\boxed{…}`` (or ``\\fbox{…}``).

    ``text[start:end]`` is the whole ``\\boxed{…}`` span. Unbalanced braces → ``None``. One
    pass matches every brace, so adversarial text (thousands of unclosed boxes) stays linear.
    """
    starts = [(m.start(), m.end() - 1) for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    closing: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closing[stack.pop()] = i
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


ANSWER_MASK = "?"
# Characters that continue a token: an occurrence of the answer glued to one of these is part of
# a longer number or word (``12`` inside ``123`` or ``x12``), not the answer itself.
_WORD = r"[0-9A-Za-z_]"


def answer_pattern(answer: str) -> re.Pattern[str] | None:
    """A regex for ``answer`` as a whole token or expression, whitespace-insensitive.

    ``-56`` matches in ``17,-56`` and ``= -56.``; ``5`` does not match inside ``15``, ``5.2``,
    ``x5`` or ``2.5``. ``None`` for an answer with nothing to match.
    """
    chars = [c for c in answer if not c.isspace()]
    if not chars:
        return None
    body = r"\s*".join(re.escape(c) for c in chars)
    before = rf"(?<!{_WORD})(?<![0-9]\.)" if re.match(_WORD, chars[0]) else ""
    after = rf"(?!{_WORD})(?!\.[0-9])" if re.match(_WORD, chars[-1]) else ""
    return re.compile(before + body + after)


def mask_answer(text: str, answer: str | None, mask: str = ANSWER_MASK) -> str:
    """``text`` with every whole-token occurrence of ``answer`` replaced by ``mask``.

    A summary must not hand the rival the final answer: removing the answer block is not
    enough when the write-up restates it (``so the answer is 12.``). Digits inside another
    number are left alone, so the work that leads to the answer stays readable.
    """
    pattern = None if answer is None else answer_pattern(answer)
    return text if pattern is None else pattern.sub(mask, text)
