"""Prompt construction for the two roles.

The drafter sees the plain problem; the challenger sees the problem plus the draft's
summary. Both go through the tokenizer's chat template when it has one, so the same
templates serve a base model, an instruct model and the shipped tiny model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agon_lightning.types import Problem

DEFAULT_CHALLENGE = (
    "{question}\n\nAnother solver's summary of its attempt:\n{summary}\n\n"
    "It may be wrong. Solve the problem yourself."
)


@dataclass
class Prompts:
    """Templates for the drafter's and the challenger's prompts.

    Attributes:
        draft: Drafter template; ``{question}`` is replaced by the problem statement.
        challenge: Challenger template; ``{question}`` and ``{summary}`` are replaced.
        system: Optional system message for chat templates.
        chat_template: Apply the tokenizer's chat template (when it has one).
        chat_template_kwargs: Extra keyword arguments for ``apply_chat_template``
            (e.g. ``{"enable_thinking": true}`` for Qwen3).
    """

    draft: str = "{question}"
    challenge: str = DEFAULT_CHALLENGE
    system: str | None = None
    chat_template: bool = True
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "{question}" not in self.draft:
            raise ValueError(f"Prompts.draft must contain '{{question}}', got {self.draft!r}")
        for key in ("{question}", "{summary}"):
            if key not in self.challenge:
                raise ValueError(f"Prompts.challenge must contain '{key}', got {self.challenge!r}")

    def render(self, tokenizer: Any, user_text: str) -> str:
        """Wrap ``user_text`` in the chat template (or return it unchanged)."""
        if not self.chat_template or getattr(tokenizer, "chat_template", None) is None:
            return user_text
        messages = [{"role": "user", "content": user_text}]
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system})
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )

    def draft_prompt(self, tokenizer: Any, problem: Problem) -> str:
        return self.render(tokenizer, fill(self.draft, question=problem.question))

    def challenge_prompt(self, tokenizer: Any, problem: Problem, summary: str) -> str:
        return self.render(tokenizer, fill(self.challenge, question=problem.question, summary=summary))


def fill(template: str, **values: str) -> str:
    """Replace ``{name}`` fields in one pass, so a value that contains braces stays as it is."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)
