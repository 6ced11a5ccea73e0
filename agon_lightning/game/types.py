"""Plain data that flows between the components: a problem, and a verifier's verdict.

Every component speaks in these two types, so a new domain (a new verifier, a new data
module) needs nothing from the trainer beyond them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SPLIT = "split"  # Problem.metadata key naming a held-out split (``"hard"``); absent: the main one


@dataclass
class Problem:
    """One task as the data module yields it.

    Attributes:
        question: The problem statement, without any chat template or instruction wrapper; for
            a conversational problem, the content of its last user message (what templates,
            summarizers and logs read).
        answer: The gold answer (a string) when the domain has one; code problems keep their
            tests in ``metadata`` instead.
        metadata: Anything a verifier needs (a reasoning-gym entry, test cases, an id); under
            :data:`SPLIT`, the held-out split the problem is reported in. A problem read from
            a dataset holds every column but the prompt here, under its own name.
        messages: A conversational prompt as TRL's datasets hold it: chat messages
            (``{"role": ..., "content": ...}``, at least one from the user) that the prompt is
            built from through the chat template; ``None`` for a plain-string prompt.

    Raises:
        ValueError: ``messages`` are not chat messages with a user message, or ``question`` is
            not the content of the last user message (:meth:`from_messages` sets it).
    """

    question: str
    answer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.messages is not None and self.question != last_user_content(self.messages):
            raise ValueError(
                "Problem.question must be the content of the last user message of Problem.messages "
                f"({last_user_content(self.messages)[:60]!r}), got {self.question[:60]!r}; "
                "Problem.from_messages sets it"
            )

    @classmethod
    def from_messages(
        cls, messages: list[dict[str, Any]], answer: str | None = None, metadata: dict[str, Any] | None = None
    ) -> Problem:
        """A conversational problem; its ``question`` is the last user message's content."""
        return cls(last_user_content(messages), answer, dict(metadata or {}), list(messages))


def last_user_content(messages: Any) -> str:
    """The content of the last ``user`` message of a chat-message list.

    Raises:
        ValueError: ``messages`` is not a non-empty list of ``{"role": str, "content": str}``
            dicts, or none of them is from the user (the message names the first fault).
    """
    fault = messages_fault(messages)
    if fault is not None:
        raise ValueError(f"not a conversational prompt: {fault}")
    return [m["content"] for m in messages if m["role"] == "user"][-1]


def messages_fault(messages: Any) -> str | None:
    """What keeps ``messages`` from being a conversational prompt, or ``None`` when it is one."""
    accepted = 'a list of chat messages, each {"role": str, "content": str}'
    if not isinstance(messages, list) or not messages:
        return f"expected {accepted}, got {_kind(messages)}"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not {"role", "content"} <= set(message):
            keys = f" with keys {sorted(message)}" if isinstance(message, dict) else ""
            return f"message {i} is {_kind(message)}{keys}; expected {accepted}"
        for key in ("role", "content"):
            if not isinstance(message[key], str):
                return f"message {i}'s {key} is {_kind(message[key])}; expected {accepted}"
    if not any(m["role"] == "user" for m in messages):
        return f"no user message (roles: {[m['role'] for m in messages]})"
    return None


def _kind(value: Any) -> str:
    return "an empty list" if value == [] else f"a {type(value).__name__}"


@dataclass
class Verdict:
    """What a verifier says of one completion.

    Attributes:
        correct: The binary reward c(·) the game is built on.
        score: A graded score in [0, 1] (partial credit, fraction of tests passed); logged,
            never used as the reward unless a reward component chooses to.
        reason: Why, in a word or two: ``"ok"``, ``"wrong_answer"``, ``"no_answer"``, …
        extracted: The answer the verifier read from the completion, if any.
        rewards: Each reward function's raw value, by function name, for a verifier built on
            reward functions (``None``: the function does not apply to this completion).
        reward: Their weighted sum over the functions that apply (TRL's reward); ``None`` when
            none applies or the verifier has no graded reward. A graded reward component
            (:class:`~agon_lightning.game.rewards.GradedReward`) pays it in place of ``correct``.
    """

    correct: bool
    score: float = 0.0
    reason: str = ""
    extracted: str | None = None
    rewards: dict[str, float | None] = field(default_factory=dict)
    reward: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"Verdict.score must be in [0, 1], got {self.score!r}")
