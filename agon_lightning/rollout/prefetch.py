"""Sampling the next step's drafts in a background thread: the thread and the staleness arithmetic.

The feature that decides when to sample ahead and drives it from the training step is
:class:`~agon_lightning.training.features.ahead.SampleAhead`; this module holds what it runs on
the rollout floor (it reads nothing of the trainer).

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
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from agon_lightning.game.types import Problem
from agon_lightning.rollout.base import RolloutBatch


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
