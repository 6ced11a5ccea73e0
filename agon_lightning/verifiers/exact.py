"""Exact match on the extracted final answer: the simplest verifier, for any domain."""

from __future__ import annotations

from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier


def normalize_answer(text: str, case_sensitive: bool = False) -> str:
    """Collapse whitespace, strip surrounding ``$`` and a trailing period."""
    text = " ".join(text.split()).strip("$ ").rstrip(".")
    return text if case_sensitive else text.lower()


class ExactMatchVerifier(Verifier):
    """Correct when the extracted answer equals the gold answer after normalisation.

    The answer is the last ``<answer>…</answer>`` block after the reasoning trace, else the
    last ``\\boxed{…}``.

    Args:
        case_sensitive: Compare case-sensitively.
    """

    def __init__(self, case_sensitive: bool = False) -> None:
        self.case_sensitive = case_sensitive

    def verify(self, completion: str, problem: Problem) -> Verdict:
        if problem.answer is None:
            raise ValueError(
                f"ExactMatchVerifier needs a gold answer; problem {problem.question[:60]!r} has none"
            )
        answer = extract_answer(completion)
        if answer is None:
            return Verdict(correct=False, score=0.0, reason="no_answer")
        ok = normalize_answer(answer, self.case_sensitive) == normalize_answer(
            problem.answer, self.case_sensitive
        )
        return Verdict(correct=ok, score=float(ok), reason="ok" if ok else "wrong_answer", extracted=answer)
