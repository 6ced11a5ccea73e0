"""Sampling ahead: the next step's first stage sampled while this step updates (one-step off-policy).

With ``rollout.max_staleness`` = K >= 1 (a backend with its own copy of the weights: vLLM in
process or on servers), this feature starts the *next* step's first-stage samples (the role the
game's spec names ``first_stage``, played by ``game.cast(step)[first_stage]``) in a background
thread just before the update and collects them once it is done (the thread itself:
:mod:`agon_lightning.rollout.prefetch`, which explains versions and bounds). ``player.draft``
takes them when they are for its step, problems and adapter and at most K versions behind;
otherwise they are dropped (counted in ``rollout/dropped_samples``, warned about) and sampled
again. A game that samples its own first stage (``first_stage: None``) is refused at start.

It is the only part of the run that reads the trainer's loop state for the rollout: whether a
next step runs, the next batch (the loader's ``peek``), and one collective per step that stops
every process when any failed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from agon_lightning.game.types import Problem
from agon_lightning.games.base import Game
from agon_lightning.games.records import StepRecord
from agon_lightning.rollout.base import Rollout, RolloutBatch
from agon_lightning.rollout.prefetch import Ahead, DraftPrefetch, too_stale, versions_behind
from agon_lightning.training.features.base import Feature


def next_step_runs(trainer: Any, num_iterations: int) -> bool:
    """Whether another training step follows this one in this epoch (as far as the trainer knows now)."""
    if trainer.is_last_batch or trainer.should_stop:
        return False
    return trainer.max_steps < 0 or trainer.global_step + num_iterations < trainer.max_steps


class SampleAhead(Feature):
    """The first stage sampled a step ahead (``rollout.max_staleness``); at K = 0 it does nothing.

    Args:
        rollout: The sampling backend (its ``max_staleness`` is K).
        corrected: Whether the loss corrects off-policy samples (``grpo.tis_cap`` set), which K >= 1 needs.
        num_iterations: μ, optimizer steps per game step (``grpo.num_iterations``).
    """

    option = "rollout.max_staleness"

    def __init__(self, rollout: Rollout, corrected: bool, num_iterations: int = 1) -> None:
        if rollout.max_staleness and not corrected:
            raise ValueError(
                f"rollout.max_staleness={rollout.max_staleness} trains on drafts sampled one adapter version "
                "behind, which the loss corrects with truncated importance weights, but grpo.tis_cap is null; "
                "set it (e.g. --model.grpo.tis_cap=2), or rollout.max_staleness=0"
            )
        self.rollout = rollout
        self.num_iterations = num_iterations
        self.dropped = 0
        """Drafts sampled ahead but dropped (too stale, or for other problems); saved in checkpoints."""
        self._prefetch: DraftPrefetch | None = None  # the next step's drafts, being sampled during the update
        self._ahead: Ahead | None = None  # the next step's drafts, sampled
        self._changed: list[str] = []  # adapters updated while a prefetch ran

    @property
    def max_staleness(self) -> int:
        return int(self.rollout.max_staleness)

    @property
    def active(self) -> bool:
        return self.max_staleness > 0

    def check(self, game: Game) -> None:
        if self.active and game.spec.first_stage is None:
            raise ValueError(
                f"rollout.max_staleness={self.max_staleness} samples the next step's first stage ahead, but the game "
                f"{game.name} samples its own (GameSpec.first_stage is None); set rollout.max_staleness=0, or draft "
                "the first stage with player.draft and name its role in first_stage"
            )

    def drafts(
        self, host: Any, problems: list[Problem], adapter: str, sample_now: Callable[[], RolloutBatch]
    ) -> tuple[RolloutBatch, int] | None:
        """This step's drafts sampled ahead, when they fit (else dropped, counted and warned about); ``None``: none."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead.rollouts is None:
            return None
        step, version = host.step, host.version
        if ahead.step == step and ahead.adapter == adapter and ahead.problems == problems:
            if not too_stale(ahead.version, version, self.max_staleness):
                return ahead.rollouts, ahead.version
            why = (
                f"{versions_behind(ahead.version, version)} versions behind, more than "
                f"rollout.max_staleness={self.max_staleness}"
            )
        else:
            why = f"sampled for step {ahead.step}'s problems by {ahead.adapter}"
        self.dropped += len(ahead.rollouts)
        rank_zero_warn(
            f"step {step}: dropped {len(ahead.rollouts)} drafts sampled ahead ({why}); sampling "
            f"them again at version {version} ({self.dropped} dropped in all)"
        )
        return None

    @contextlib.contextmanager
    def around_update(self, host: Any, record: StepRecord) -> Iterator[dict[str, float]]:
        """At K >= 1, the next step's drafts sampled in the background while the update runs.

        Yields a dict that holds, once the update is done, how far behind the version this step's
        samples were, the drafts dropped so far and the seconds waited for the thread. The thread
        is always joined, also when the update raises.
        """
        metrics: dict[str, float] = {}
        if not self.active:
            yield metrics
            return
        trainer, version = host.trainer, host.version
        behind = torch.cat([versions_behind(r.versions, version) for r in record.roles])
        if next_step_runs(trainer, self.num_iterations) and (problems := self._peek(trainer)) is not None:
            step = record.step + 1
            adapter = host.game.cast(step)[host.game.spec.first_stage]
            prompts = [host.prompts.draft_prompt(host.tokenizer, p) for p in problems]
            n = host.num_generations

            def sample() -> RolloutBatch:
                return self.rollout.generate_ahead(
                    host.policy, host.tokenizer, prompts, n, [adapter] * len(prompts)
                )

            self._prefetch = DraftPrefetch(Ahead(step, list(problems), adapter, version), sample)
        try:
            yield metrics
        except BaseException:
            self._collect(host, failed=True)
            raise
        waited = self._collect(host)
        metrics["rollout/staleness"] = float(behind.max())  # the drafts'; challenges are never behind
        metrics["rollout/dropped_samples"] = float(self.dropped)
        metrics["time/ahead_wait_s"] = waited

    def weights_updated(self, host: Any, adapters: list[str]) -> bool:
        """While the next step's drafts are sampled, the rollout is told once they are done."""
        if self._prefetch is None:
            return False
        self._changed.extend(a for a in adapters if a not in self._changed)
        return True

    def on_train_end(self, host: Any) -> None:
        self._ahead = None  # drafts sampled for a step that did not come (the run stopped early)

    def state_dict(self) -> dict[str, Any]:
        # Drafts sampled ahead are not saved: a resumed run samples its first step again.
        return {"dropped_samples": self.dropped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dropped = int(state.get("dropped_samples", 0))

    def _peek(self, trainer: Any) -> list[Problem] | None:
        """The next batch of the training loader, without handing it out (``None`` at the epoch's end)."""
        loader = trainer.train_dataloader
        peek = getattr(loader, "peek", None)
        if peek is None:
            raise TypeError(
                f"rollout.max_staleness={self.max_staleness} drafts the next step's problems ahead, which "
                f"needs a training loader that can show its next batch (peek()), but it is a {type(loader).__name__}; "
                "return an agon_lightning.data.base.ResumableDataLoader (every ProblemDataModule does), or set "
                "rollout.max_staleness=0"
            )
        return peek()

    def _collect(self, host: Any, failed: bool = False) -> float:
        """Join the thread; tell the rollout of the update's changes; the seconds waited.

        Its exception is raised here (any process's stops every process: one collective, on every
        rank alike at K >= 1). With ``failed`` (the update itself raised) the drafts are only
        waited for and dropped, and nothing collective is called.
        """
        prefetch, self._prefetch = self._prefetch, None
        t0 = time.perf_counter()
        error = prefetch.wait() if prefetch is not None else None
        waited = time.perf_counter() - t0
        changed, self._changed = self._changed, []
        if changed:
            self.rollout.on_weights_updated(host.policy, changed)
        if failed:
            return waited
        if host.trainer.strategy.reduce_boolean_decision(error is not None, all=False):
            raise error or RuntimeError(
                "another process failed sampling the next step's drafts ahead (its log names why)"
            )
        self._ahead = prefetch.ahead if prefetch is not None else None
        return waited
