"""The Countdown summary: the text after the trace, with no answer and no full use of the numbers.

A Countdown draft ends with claims a challenger can check in one operation each (see
:mod:`agon_lightning.testbeds.countdown.task`): the steps of its best attempt but the last, the values they
leave and the value reached. On top of the rule every summarizer follows (the answer span cut,
restatements masked: :mod:`agon_lightning.summarizers.hiding`), nothing in it may combine every
given number, alone or composed through the values it produces: each such piece reads ``?``
(:func:`~agon_lightning.summarizers.hiding.mask_full_uses`). The challenger always has a step
of its own to do.
"""

from __future__ import annotations

from agon_lightning.game.types import Problem
from agon_lightning.summarizers.basic import StripTraceSummarizer
from agon_lightning.summarizers.hiding import mask_full_uses


def countdown_numbers(problem: Problem) -> list[int]:
    """The given numbers of a reasoning-gym ``countdown`` problem.

    Raises:
        ValueError: When ``problem`` carries no countdown entry.
    """
    entry = problem.metadata.get("entry")
    numbers = entry.get("metadata", {}).get("numbers") if isinstance(entry, dict) else None
    if not numbers:
        raise ValueError(
            "a Countdown summary needs problem.metadata['entry']['metadata']['numbers'] "
            f"(reasoning-gym's countdown); got metadata keys {sorted(problem.metadata)}"
        )
    return [int(n) for n in numbers]


class CountdownSummarizer(StripTraceSummarizer):
    """Everything after the last ``</think>``, the answer cut, and every full use of the numbers
    masked.

    Args:
        max_chars: Truncate summaries longer than this (0 = no limit).
        empty_text: What the challenger reads when there is no summary.
        mask: What replaces a restated answer or a piece that would use every number.
    """

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        summary = super().summarize(draft, problem, truncated)
        if summary == self.empty_text:
            return summary
        return mask_full_uses(summary, countdown_numbers(problem), self.mask).strip() or self.empty_text
