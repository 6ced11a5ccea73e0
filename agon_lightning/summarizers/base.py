"""The summarizer interface: what of a draft the challenger gets to read."""

from __future__ import annotations

from abc import ABC, abstractmethod

from agon_lightning.types import Problem


class Summarizer(ABC):
    """Turns a drafter's completion into the text shown to the challenger.

    ``truncated`` says whether the draft hit ``max_new_tokens``; a draft cut off inside its
    reasoning has no summary to give.
    """

    @abstractmethod
    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        """Return the summary (possibly empty). Must not raise on malformed model output."""
