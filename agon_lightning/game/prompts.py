"""Prompt construction for the two roles.

The drafter sees the plain problem; the challenger sees the problem plus the draft's
summary. Both go through the tokenizer's chat template when it has one, so the same
templates serve a base model, an instruct model and the shipped tiny model.

A conversational problem (TRL's format: ``Problem.messages``) keeps its conversation: only the
last user message is templated (the draft template around it, or the challenge template with
the rival's summary), so a dataset's system prompt and earlier turns reach the model as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agon_lightning.game.types import Problem, last_user_content

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

    def render(self, tokenizer: Any, user_text: str, messages: list[dict[str, Any]] | None = None) -> str:
        """``user_text`` as the model reads it: wrapped in the chat template, or unchanged without one.

        Args:
            tokenizer: The model's tokenizer.
            user_text: The user's turn (a filled template).
            messages: A conversational problem's messages: ``user_text`` replaces the content of
                the last user message and the others are kept; :attr:`system` is added only when
                they have no system message. Ending on an assistant message, the prompt continues
                it (TRL's ``continue_final_message``).

        Raises:
            ValueError: ``messages`` hold more than one message but there is no chat template
                (none on the tokenizer, or ``chat_template: false``) to render them with.
        """
        if not self.chat_template or getattr(tokenizer, "chat_template", None) is None:
            if messages is not None and len(messages) > 1:
                roles = [m["role"] for m in messages]
                raise ValueError(
                    f"a conversational prompt of {len(messages)} messages (roles {roles}) needs a chat template, "
                    f"and {'prompts.chat_template is false' if not self.chat_template else 'the tokenizer has none'}; "
                    "use a tokenizer with a chat template or plain-string prompts"
                )
            return user_text
        turns = with_last_user_content(messages, user_text)
        if self.system and not any(m["role"] == "system" for m in turns):
            turns.insert(0, {"role": "system", "content": self.system})
        prefill = turns[-1]["role"] == "assistant"
        return tokenizer.apply_chat_template(
            turns,
            tokenize=False,
            add_generation_prompt=not prefill,
            **({"continue_final_message": True} if prefill else {}),
            **self.chat_template_kwargs,
        )

    def draft_prompt(self, tokenizer: Any, problem: Problem) -> str:
        """The drafter's prompt: :attr:`draft` filled with the problem's question."""
        return self.render(tokenizer, fill(self.draft, question=problem.question), problem.messages)

    def challenge_prompt(self, tokenizer: Any, problem: Problem, summary: str) -> str:
        """The challenger's prompt: :attr:`challenge` filled with the question and the draft's summary."""
        text = fill(self.challenge, question=problem.question, summary=summary)
        return self.render(tokenizer, text, problem.messages)


def with_last_user_content(messages: list[dict[str, Any]] | None, content: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose last user message says ``content``; one user message when ``None``."""
    if messages is None:
        return [{"role": "user", "content": content}]
    last_user_content(messages)  # raises on a list that is not chat messages
    turns = [dict(m) for m in messages]
    last = max(i for i, m in enumerate(turns) if m["role"] == "user")
    turns[last]["content"] = content
    return turns


def fill(template: str, **values: str) -> str:
    """Replace ``{name}`` fields in one pass, so a value that contains braces stays as it is."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)
