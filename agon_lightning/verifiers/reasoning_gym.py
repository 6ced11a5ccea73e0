"""reasoning-gym's own scorers, thresholded to the binary reward the game needs.

``score_answer`` gives partial credit (e.g. 0.01 for a wrong but well-formed number); the
graded score is kept in :attr:`Verdict.score`, the 0/1 verdict is ``score >= threshold``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier


@cache
def _scorer(task: str) -> Any:
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(task)


class ReasoningGymVerifier(Verifier):
    """Scores with the reasoning-gym task named in ``problem.metadata["task"]``.

    Args:
        threshold: Minimum score counted as correct (1.0 = only full credit).
    """

    def __init__(self, threshold: float = 1.0) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold

    def verify(self, completion: str, problem: Problem) -> Verdict:
        task, entry = problem.metadata.get("task"), problem.metadata.get("entry")
        if task is None or entry is None:
            raise ValueError(
                "ReasoningGymVerifier needs problem.metadata['task'] and ['entry'] "
                f"(from ReasoningGymDataModule); got keys {sorted(problem.metadata)}"
            )
        answer = extract_answer(completion)
        if answer is None:
            return Verdict(correct=False, score=0.0, reason="no_answer")
        try:
            score = float(_scorer(task)(answer, entry))
        except Exception as err:  # a scorer crashing on model output is a wrong answer
            return Verdict(
                correct=False, score=0.0, reason=f"scorer_error: {type(err).__name__}", extracted=answer
            )
        score = min(max(score, 0.0), 1.0)
        ok = score >= self.threshold
        return Verdict(correct=ok, score=score, reason="ok" if ok else "wrong_answer", extracted=answer)
