"""What a callback may read of the module it watches: the public attributes, typed.

The callbacks of this package run beside :class:`~agon_lightning.training.module.AgonModule`
and read its state — the last training step's record, the evaluator's history — rather than
generating anything themselves. :class:`AgonModuleView` names exactly those attributes (a test
scans ``callbacks/*.py`` and holds the two equal), so a rename in the module fails a test
instead of a callback at the end of a run. Any module with these attributes works: the
Protocol is structural, and the tests' scripted modules satisfy it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torch import nn

    from agon_lightning.game.prompts import Prompts
    from agon_lightning.rollout.base import Rollout, RolloutBatch
    from agon_lightning.training.deployment import Deployment
    from agon_lightning.training.module import StepRecord


@runtime_checkable
class EvaluatorView(Protocol):
    """The public state of :class:`~agon_lightning.training.validation.CascadeEvaluator`."""

    history: list[tuple[int, dict[str, float]]]
    """``(step, {metric: value})`` for each finished evaluation, oldest first."""
    last_outcomes: list[dict[str, Any]]
    """The last finished evaluation's outcome rows, one per problem and policy."""
    last_outputs: list[dict[str, Any]]
    """The last validation batch's decoded outputs (``key``, ``text``, ...)."""
    deployed_key: str
    """The evaluator key of the policy a bundle deploys (``cascade_ab``, ``alpha``, ...)."""

    @property
    def deployment(self) -> Deployment:
        """The policy a bundle deploys: the game's answer graph or a cascade's drafter and answerer."""
        ...

    @property
    def deployed_drafter(self) -> str | None:
        """The adapter that drafts in the deployed policy (``None``: the game's own answer graph)."""
        ...


@runtime_checkable
class AgonModuleView(Protocol):
    """The public attributes of :class:`~agon_lightning.training.module.AgonModule` callbacks read."""

    adapter_names: tuple[str, ...]
    """The adapters the run trains, in :mod:`agon_lightning.game.names`' spelling."""
    agon_step: int
    """Game steps taken; drives the role schedule."""
    evaluator: EvaluatorView
    """The cascade evaluator: its history and the last evaluation's outcomes."""
    game: Any
    """The game: its ``spec`` (roles, the roles whose completions answer the problem, deployment)."""
    last_record: StepRecord | None
    """What the last training step played (problems, rollouts, rewards); ``None`` before one."""
    policy: nn.Module
    """The PEFT model holding the base and every adapter."""
    prompts: Prompts
    """The prompt templates the run drafts and answers with."""
    rollout: Rollout
    """The sampling backend (``max_new_tokens`` and the sampling settings)."""
    tokenizer: Any
    """The base model's tokenizer."""

    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        """Sample with ``adapter`` (``None``: adapters off)."""
        ...

    def log_dict(self, dictionary: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``LightningModule.log_dict``."""
        ...
