"""The verifier interface: one completion and its problem in, a :class:`Verdict` out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from agon_lightning.game.types import Problem, Verdict


class Verifier(ABC):
    """Judges a completion against its problem.

    Subclasses implement :meth:`verify`. Verifiers that can judge many completions faster
    together (a process pool, a sandbox) override :meth:`verify_batch`.
    """

    @abstractmethod
    def verify(self, completion: str, problem: Problem) -> Verdict:
        """Judge one completion. Must not raise on malformed model output."""

    def verify_batch(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[Verdict]:
        """Judge ``completions[i]`` against ``problems[i]`` for every i."""
        if len(completions) != len(problems):
            raise ValueError(
                f"verify_batch needs one problem per completion, got {len(completions)} "
                f"completions and {len(problems)} problems"
            )
        return [self.verify(c, p) for c, p in zip(completions, problems)]

    def grades(self, problem: Problem) -> bool:
        """Whether this verifier can judge ``problem`` at deployment (default: it has a gold answer)."""
        return problem.answer is not None

    def check_problems(self, problems: Sequence[Problem], where: str = "the training problems") -> None:
        """Refuse, before training, problems this verifier could only judge wrong (default: no check).

        Raises:
            ValueError: what is missing, named (a verifier reading columns names the column).
        """
        return None  # a verifier that reads only the answer and the text has nothing to check
