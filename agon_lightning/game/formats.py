"""Format checks: φ, the reward term that pays a completion for having the expected shape.

The paper pays each role ``w_f·φ`` on top of correctness, φ being 1 when the reasoning trace
is closed and a final answer follows it. What "a final answer" looks like depends on the
domain (an ``<answer>`` block, a ``\\boxed{}``, a program in a fenced block), and whether
the completion opens its own trace depends on the chat template (Qwen3's opens ``<think>``
in the prompt when thinking is on), so φ is a component: a :class:`FormatCheck`, chosen by
``class_path`` under ``model.reward.init_args.format`` and registered through the
``agon_lightning.formats`` entry-point group, so a new domain brings its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

from agon_lightning.game.text import THINK_CLOSE, THINK_OPEN, code_blocks, last_boxed_span

ANSWER_KINDS = ("tag", "boxed", "code")
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


class FormatCheck(ABC):
    """Scores the shape of one completion (not its correctness)."""

    @abstractmethod
    def score(self, completion: str) -> float:
        """φ in ``[0, 1]``. Must not raise on malformed model output."""


def closed_trace_tail(completion: str, opened_by_prompt: bool) -> str | None:
    """The text after a well-formed, closed reasoning trace; ``None`` when the trace is malformed.

    Well-formed: exactly one ``</think>``; and exactly one ``<think>``, before everything but
    whitespace (``opened_by_prompt=False``), or none at all (``opened_by_prompt=True``: the
    prompt opened the trace, so the completion only closes it).
    """
    if completion.count(THINK_CLOSE) != 1:
        return None
    head, tail = completion.split(THINK_CLOSE)
    opens = head.count(THINK_OPEN)
    if opened_by_prompt:
        return tail if opens == 0 else None
    return tail if opens == 1 and head.lstrip().startswith(THINK_OPEN) else None


def has_answer(tail: str, answer: str) -> bool:
    """Whether ``tail`` (the text after the trace) gives a final answer of kind ``answer``.

    ``tag``: exactly one ``<answer>…</answer>`` (one opening and one closing tag, in that order,
    non-empty between them); ``boxed``: a brace-balanced ``\\boxed{…}`` with something inside;
    ``code``: a closed fenced code block (any language) with a non-empty body.
    """
    if answer == "tag":
        if tail.count(ANSWER_OPEN) != 1 or tail.count(ANSWER_CLOSE) != 1:
            return False
        start, end = tail.index(ANSWER_OPEN) + len(ANSWER_OPEN), tail.index(ANSWER_CLOSE)
        return start <= end and bool(tail[start:end].strip())
    if answer == "boxed":
        span = last_boxed_span(tail)
        return span is not None and bool(span[2].strip())
    if answer == "code":
        return any(body.strip() for _, _, body in code_blocks(tail, languages=None))
    raise ValueError(f"answer must be one of {ANSWER_KINDS}, got {answer!r}")


class ThinkAnswerFormat(FormatCheck):
    """φ = 1 when the completion closes one ``<think>`` trace and a final answer follows it.

    Args:
        answer: What must follow the closed trace: ``tag`` an ``<answer>…</answer>`` block (the
            paper's), ``boxed`` a ``\\boxed{}``, ``code`` a fenced code block.
        trace_opened_by_prompt: The prompt already opened ``<think>`` (Qwen3's chat template with
            thinking on), so the completion must close it without opening another.
    """

    def __init__(
        self, answer: Literal["tag", "boxed", "code"] = "tag", trace_opened_by_prompt: bool = False
    ) -> None:
        if answer not in ANSWER_KINDS:
            raise ValueError(f"answer must be one of {ANSWER_KINDS}, got {answer!r}")
        self.answer = answer
        self.trace_opened_by_prompt = trace_opened_by_prompt

    def score(self, completion: str) -> float:
        tail = closed_trace_tail(completion, self.trace_opened_by_prompt)
        return float(tail is not None and has_answer(tail, self.answer))
