"""Sampling the next step's drafts while this step updates: one-step off-policy overlap.

A synchronous step samples, then updates, and the sampler waits while the trainer computes.
With ``rollout.max_staleness`` = K >= 1 (a backend with its own copy of the weights: vLLM in
process or on servers), the :class:`DraftSource` the module asks for its drafts starts the *next*
step's drafts in a background thread just before the update and collects them once it is done, so sampling and the
update run at the same time (verl's one-step off-policy; AReaL and PipelineRL bound the
staleness the same way).

**Which version produced what.** The module counts policy versions: one per step whose
update went through (:attr:`AgonModule.policy_version`). The background thread samples with
the adapter versions the backend already holds — step t's, the ones step t's drafts and
challenges came from — because the update's new weights are marked for the backend only
once the thread is done (nothing is pushed, no collective is called from the thread). So
step t+1's drafts are one version behind; step t+1's challenges are sampled after those
drafts exist, by the challenger at step t+1's version, reading step t+1's drafts. Each role
records the version of each of its rows; the loss re-weights every token by the existing
truncated importance weight ``min(π_trainer / π_sampler, grpo.tis_cap)``, which is why
K >= 1 needs ``grpo.tis_cap``.

**Bounds.** Drafts more than K versions behind when their step comes are dropped — counted
in ``rollout/dropped_samples`` and warned about — and sampled again at the current version;
so are drafts for problems other than the ones the step was handed. The pipeline is one
step deep, so a K above 1 changes nothing yet.

**What it does not sample ahead.** The first step of a run or of an epoch (there is no
earlier update to overlap), and nothing after the last step. Drafts are collected within the
step that started them, so checkpoints, validation and callbacks never run beside the
thread. A checkpoint holds no drafts sampled ahead: a resumed run samples its first step
again, at its own version (neither lost nor trained on twice).

**Failures.** An exception in the thread is raised in the main thread when the drafts are
collected, the same exception with a note saying where it happened (a lost server is still
a resumable :class:`~agon_lightning.rollout.server_http.ReplicaError`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from agon_lightning.game.types import Problem
from agon_lightning.rollout.base import Rollout, RolloutBatch


def versions_behind(versions: Tensor | int, current: int) -> Tensor | int:
    """How many policy versions ``versions`` (one, or ``[B]`` per row) are behind ``current`` (0: the current one)."""
    return current - versions


def too_stale(versions: Tensor | int, current: int, max_staleness: int) -> Tensor | bool:
    """Whether ``versions`` (one, or ``[B]`` per row) are more than ``max_staleness`` behind ``current``."""
    return versions_behind(versions, current) > max_staleness


@dataclass
class Ahead:
    """Drafts sampled ahead for one step.

    Attributes:
        step: The game step they are for.
        problems: That step's problems, in order.
        adapter: The drafter of that step.
        version: The policy version the backend sampled them with.
        rollouts: The drafts (``None`` until the thread is done).
    """

    step: int
    problems: list[Problem]
    adapter: str
    version: int
    rollouts: RolloutBatch | None = None


class DraftPrefetch:
    """One background thread sampling one step's drafts; :meth:`wait` collects them.

    Args:
        ahead: What is being sampled (its ``rollouts`` are filled in).
        sample: Samples the drafts; runs in the thread, under ``torch.no_grad``.
    """

    def __init__(self, ahead: Ahead, sample: Callable[[], RolloutBatch]) -> None:
        self.ahead = ahead
        self._sample = sample
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"agon-drafts-step-{ahead.step}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with torch.no_grad():
                self.ahead.rollouts = self._sample()
        except BaseException as err:  # handed to the main thread by wait(), never dropped
            self._error = err

    def wait(self) -> BaseException | None:
        """Join the thread (call once): its exception, noted with where it happened, or ``None`` once the drafts are in."""
        self._thread.join()
        if self._error is not None:
            self._error.add_note(
                f"(raised while sampling step {self.ahead.step}'s drafts ahead, in the background)"
            )
        return self._error


#: What the module hands the draft source for the next step: its problems → (step, drafter, the sampling call).
NextJob = Callable[[list[Problem]], tuple[int, str, Callable[[], RolloutBatch]]]


def next_step_runs(trainer: Any, num_iterations: int) -> bool:
    """Whether another training step follows this one in this epoch (as far as the trainer knows now)."""
    if trainer.is_last_batch or trainer.should_stop:
        return False
    return trainer.max_steps < 0 or trainer.global_step + num_iterations < trainer.max_steps


class DraftSource:
    """A step's drafts, sampled in the step or ahead of it: the one object the training step asks.

    It owns sampling ahead: the background thread, the drafts it sampled, the adapters updated
    while it ran (told to the rollout once it is done), the drafts dropped, and the only reads
    of ``rollout.max_staleness``. At K = 0 it samples in the step and tells the rollout of each
    update at once; :meth:`around_update` does nothing.

    Args:
        rollout: The sampling backend (its ``max_staleness`` is K).
        corrected: Whether the loss corrects off-policy samples (``grpo.tis_cap`` set), which K >= 1 needs.
    """

    def __init__(self, rollout: Rollout, corrected: bool) -> None:
        if rollout.max_staleness and not corrected:
            raise ValueError(
                f"rollout.max_staleness={rollout.max_staleness} trains on drafts sampled one adapter version "
                "behind, which the loss corrects with truncated importance weights, but grpo.tis_cap is null; "
                "set it (e.g. --model.grpo.tis_cap=2), or rollout.max_staleness=0"
            )
        self.rollout = rollout
        self.dropped = 0
        """Drafts sampled ahead but dropped (too stale, or for other problems); saved in checkpoints."""
        self._prefetch: DraftPrefetch | None = None  # the next step's drafts, being sampled during the update
        self._ahead: Ahead | None = None  # the next step's drafts, sampled
        self._changed: list[str] = []  # adapters updated while a prefetch ran

    @property
    def max_staleness(self) -> int:
        return int(self.rollout.max_staleness)

    def drafts(
        self,
        step: int,
        problems: list[Problem],
        drafter: str,
        version: int,
        sample_now: Callable[[], RolloutBatch],
    ) -> tuple[RolloutBatch, int]:
        """Step ``step``'s drafts and the policy version they were sampled with.

        Drafts sampled ahead are used when they are for this step's problems and drafter and at
        most K versions behind ``version``; otherwise they are dropped (counted, with a warning)
        and ``sample_now`` samples them at ``version``.
        """
        from lightning.pytorch.utilities import rank_zero_warn

        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.rollouts is not None:
            # one version for the whole batch: one comparison
            if ahead.step == step and ahead.adapter == drafter and ahead.problems == problems:
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
        return sample_now(), version

    @contextmanager
    def around_update(
        self,
        trainer: Any,
        policy: Any,
        versions: list[Tensor],
        version: int,
        next_job: NextJob,
        num_iterations: int,
    ) -> Iterator[dict[str, float]]:
        """Around one update: at K >= 1, the next step's drafts sampled meanwhile in the background.

        Yields a dict that holds, once the update is done, how far behind ``version`` this step's
        samples (``versions``, each role's per row) were, the drafts dropped so far and the
        seconds waited for the thread; empty at K = 0. The thread is always joined, also when the
        update raises.
        """
        metrics: dict[str, float] = {}
        if not self.max_staleness:
            yield metrics
            return
        behind = torch.cat([versions_behind(v, version) for v in versions])
        if next_step_runs(trainer, num_iterations) and (problems := self._peek(trainer)) is not None:
            step, drafter, sample = next_job(problems)
            self._prefetch = DraftPrefetch(Ahead(step, list(problems), drafter, version), sample)
        try:
            yield metrics
        except BaseException:
            self._collect(trainer, policy, failed=True)
            raise
        waited = self._collect(trainer, policy)
        metrics["rollout/staleness"] = float(behind.max())  # the drafts'; challenges are never behind
        metrics["rollout/dropped_samples"] = float(self.dropped)
        metrics["time/ahead_wait_s"] = waited

    def weights_updated(self, policy: Any, adapters: list[str]) -> None:
        """Tell the rollout ``adapters`` changed; while the next step's drafts are sampled, once they are done."""
        if self._prefetch is None:
            self.rollout.on_weights_updated(policy, adapters)
        else:
            self._changed.extend(a for a in adapters if a not in self._changed)

    def discard(self) -> None:
        """Drop drafts sampled for a step that did not come (the run stopped early)."""
        self._ahead = None

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

    def _collect(self, trainer: Any, policy: Any, failed: bool = False) -> float:
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
            self.rollout.on_weights_updated(policy, changed)
        if failed:
            return waited
        if trainer.strategy.reduce_boolean_decision(error is not None, all=False):
            raise error or RuntimeError(
                "another process failed sampling the next step's drafts ahead (its log names why)"
            )
        self._ahead = prefetch.ahead if prefetch is not None else None
        return waited
