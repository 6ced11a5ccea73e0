"""Prompts that leave no room for the completion: found when the run starts, never truncated.

A prompt of P tokens sampled with a budget of ``max_new_tokens`` needs P + ``max_new_tokens``
positions of the model's context (``max_position_embeddings`` in its ``config.json``; a rollout
backend's ``max_model_len`` where that is smaller). A longer one cannot be sampled as asked: the
model would read positions it was never trained on, and an extreme one (200k tokens) asks the
decode loop for tens of gigabytes. Such problems are found here before the model loads, from its
config and tokenizer alone, with the drafter's prompt built as the rollout builds it (the draft
template, the chat template, no special tokens added). ``too_long: drop`` leaves them out and
says so in one line of the log (how many, of how many, the limit); ``too_long: error`` refuses the
data; a set left with no problem is refused either way.

The challenger's prompt adds the rival's summary, which exists only during the run: there the
decode loop refuses a prompt longer than the context (:mod:`agon_lightning.rollout.decode_loop`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from agon_lightning.game.types import Problem
from agon_lightning.infra.errors import UsageError

QUOTED_CHARS = 20  # of the first too-long question, quoted in a refusal


@dataclass(frozen=True)
class PromptBudget:
    """How long a prompt may be: the model's context less the completion budget.

    Attributes:
        context: Longest prompt + completion the model takes, in tokens.
        max_new_tokens: The completion budget (``model.rollout.max_new_tokens``).
        context_from: Where ``context`` was read, for messages.
    """

    context: int
    max_new_tokens: int
    context_from: str = "max_position_embeddings"

    @property
    def limit(self) -> int:
        """The longest prompt that leaves room for the completion (< 1: none does)."""
        return self.context - self.max_new_tokens

    def describe(self) -> str:
        """The limit and where it comes from, for messages."""
        return (
            f"the model's {self.context}-token context ({self.context_from}) less "
            f"model.rollout.max_new_tokens={self.max_new_tokens}"
        )


def model_budget(
    model_path: str, max_new_tokens: int, max_model_len: int | None = None
) -> PromptBudget | None:
    """The budget of the model at ``model_path`` (a local directory or Hub id), from its config alone.

    Args:
        model_path: Where the model's ``config.json`` is.
        max_new_tokens: The completion budget.
        max_model_len: A rollout backend's own limit on prompt + completion (``None``: none).

    Returns:
        The budget; ``None`` when neither the config nor the backend states a context length.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    context = getattr(config.get_text_config(), "max_position_embeddings", None)
    if max_model_len is not None and (context is None or max_model_len < context):
        return PromptBudget(max_model_len, max_new_tokens, "model.rollout.max_model_len")
    return None if context is None else PromptBudget(int(context), max_new_tokens)


def draft_prompt_lengths(
    tokenizer: Any, draft_prompt: Callable[[Any, Problem], str]
) -> Callable[[list[Problem]], list[int]]:
    """Each problem's drafter prompt length in tokens, as the rollout encodes it.

    Args:
        tokenizer: The model's tokenizer.
        draft_prompt: Builds the drafter's prompt (``Prompts.draft_prompt``).
    """

    def lengths(problems: list[Problem]) -> list[int]:
        try:
            texts = [draft_prompt(tokenizer, p) for p in problems]
        except ValueError as err:  # the data and the prompt settings disagree: the user's to fix, in one line
            raise UsageError(f"the drafter's prompt cannot be built from the data: {err}") from err
        # verbose=False: the tokenizer's own warning about a sequence longer than the model's is what is reported here
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]

    return lengths


def keep_fitting(
    problems: list[Problem],
    lengths: Callable[[list[Problem]], list[int]],
    budget: PromptBudget,
    too_long: str,
    what: str,
) -> list[Problem]:
    """``problems`` without those whose prompt is longer than ``budget.limit``; the dropped ones counted in the log.

    Args:
        problems: The problems of one set.
        lengths: Each problem's prompt length in tokens.
        budget: The model's context and the completion budget.
        too_long: ``drop`` or ``error``.
        what: The set, for messages (``"training problems of FileProblemDataModule 'x.jsonl'"``).

    Raises:
        UsageError: some prompt is too long and ``too_long`` is ``error``, or every one is.
    """
    sizes = lengths(problems)
    over = [i for i, n in enumerate(sizes) if n > budget.limit]
    if not over:
        return problems
    longest = max(sizes[i] for i in over)
    counted = f"{len(over)} of {len(problems)} {what}"
    too_long_by = f"a prompt longer than {max(budget.limit, 0)} tokens (longest {longest})"
    if too_long == "error" or len(over) == len(problems):
        first = f"first: {sizes[over[0]]} tokens, {problems[over[0]].question[:QUOTED_CHARS]!r}"
        remedy = "shorten them, lower model.rollout.max_new_tokens, or take a model with a longer context"
        if len(over) < len(problems):
            remedy += "; --data.too_long=drop leaves them out"
        else:
            too_long_by += ", so none would be left"
        raise UsageError(f"{counted} have {too_long_by}: {budget.describe()}; {remedy} ({first})")
    rank_zero_warn(
        f"dropped {counted}, each with {too_long_by}: {budget.describe()}; --data.too_long=error refuses them instead"
    )
    dropped = set(over)
    return [p for i, p in enumerate(problems) if i not in dropped]
