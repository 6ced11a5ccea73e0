"""The summarizer interface: what of a draft the challenger gets to read."""

from __future__ import annotations

from abc import ABC, abstractmethod

from agon_lightning.game.types import Problem


class Summarizer(ABC):
    """Turns a drafter's completion into the text shown to the challenger.

    ``truncated`` says whether the draft hit ``max_new_tokens``; a draft cut off inside its
    reasoning, or before it stated its answer, has no summary to give. A summary never holds
    an answer the draft gives: the built-ins share one rule for that
    (:mod:`agon_lightning.summarizers.hiding`), which a new summarizer can reuse.
    """

    @abstractmethod
    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        """Return the summary (possibly empty). Must not raise on malformed model output."""
