"""A control summarizer: the challenger reads a summary, but of another problem's draft.

Reading a rival's summary can help a challenger for two reasons: what the summary says, and
that any text in the prompt sends a greedy or low-temperature search down another path than
the drafter's own. The Countdown base shows the second (its precondition 3b: a failed draft's
real summary helps barely more than another problem's). A run with this summarizer keeps every
part of a game but the content: each challenger reads the most recent summary the wrapped
summarizer gave for a *different* problem (the first one, with none before it, reads the empty
text), so the difference to a plain run is what the summary's content is worth.

The shown summary passes through the wrapped summarizer once more, as the text after a trace
(with an empty answer), so its hiding rule is applied against the problem being answered (for
Countdown: no piece of arithmetic in it uses every number of *this* problem).
"""

from __future__ import annotations

from collections import OrderedDict

from agon_lightning.game.types import Problem
from agon_lightning.summarizers.base import Summarizer


class OtherProblemSummarizer(Summarizer):
    """Shows each challenger the latest summary of another problem's draft.

    Args:
        summarizer: The summarizer whose summaries are shown (and whose hiding rule is applied
            again against the problem being answered).
        empty_text: What a challenger reads when no other problem has a summary yet.
        remember: How many problems' latest summaries are kept.
    """

    def __init__(self, summarizer: Summarizer, empty_text: str = "", remember: int = 64) -> None:
        if remember < 2:
            raise ValueError(f"remember must be >= 2 (this problem and another), got {remember}")
        self.summarizer = summarizer
        self.empty_text = empty_text
        self.remember = remember
        self._latest: OrderedDict[str, str] = OrderedDict()

    def summarize(self, draft: str, problem: Problem, truncated: bool = False) -> str:
        own = self.summarizer.summarize(draft, problem, truncated)
        other = next((s for q, s in reversed(self._latest.items()) if q != problem.question), None)
        self._latest[problem.question] = own
        self._latest.move_to_end(problem.question)
        while len(self._latest) > self.remember:
            self._latest.popitem(last=False)
        if not other:
            return self.empty_text
        return self.summarizer.summarize(f"<think></think>{other}<answer></answer>", problem)
