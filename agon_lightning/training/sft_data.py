"""The SFT data: a task's worked solutions as examples in both roles' prompts, and their data module.

A task's :class:`SFTExamples` builds them: each problem becomes a drafter's example (the plain
problem prompt) or a challenger's (the problem plus a rival's summary: right, slipped, partial or
cut off — every summary a challenger can meet in RL). A testbed's builder registers under the
``agon_lightning.examples`` entry-point group (:data:`EXAMPLES_GROUP`), which is how the default,
the chain_sum testbed's arithmetic (``arithmetic``:
:class:`~agon_lightning.testbeds.chain_sum.sft.ArithmeticExamples`), reaches this floor without
it importing a testbed; Countdown brings its own (``countdown``:
:class:`~agon_lightning.testbeds.countdown.sft.CountdownExamples`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import torch
from torch.utils.data import DataLoader

from agon_lightning.data.base import GeneratorShuffleSampler, ProblemDataset, ResumableDataLoader
from agon_lightning.data.holdout import HashHoldout
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule, generate_problems, training_problems
from agon_lightning.game.types import Problem
from agon_lightning.moved import moved_names
from agon_lightning.training.validation import SPLIT

RIVALS = ("right", "slipped", "partial", "empty")
#: The entry-point group a task's :class:`SFTExamples` registers under (``--data.examples=NAME``).
EXAMPLES_GROUP = "agon_lightning.examples"
#: The registered builder used when a data module is given no ``examples``: the chain_sum arithmetic.
DEFAULT_EXAMPLES = "arithmetic"


@dataclass
class SFTExample:
    """One supervised example.

    Attributes:
        problem: The problem.
        target: The completion to learn (the correct worked solution).
        rival_draft: For a challenger example, the rival's full draft (its summary goes in the
            prompt); ``None`` for a drafter example.
        rival: What the rival's draft is (one of :data:`RIVALS`), for a challenger example.
    """

    problem: Problem
    target: str
    rival_draft: str | None = None
    rival: str = ""

    @property
    def kind(self) -> str:
        """``draft`` or ``challenge_<rival>`` (the metric group)."""
        return "draft" if self.rival_draft is None else f"challenge_{self.rival}"


class SFTExamples(ABC):
    """Builds a task's SFT examples: its own worked solutions and rivals, in the metric groups of
    :data:`RIVALS` (``SFTExample.rival``), so the SFT module logs them like the arithmetic ones."""

    @abstractmethod
    def build(self, problems: list[Problem], seed: int) -> list[SFTExample]:
        """The training examples for ``problems`` (seeded: same problems and seed, same examples)."""

    @abstractmethod
    def evaluate(self, problems: list[Problem], seed: int) -> list[SFTExample]:
        """The held-out examples: each problem as a drafter, and as a challenger."""

    #: Judges a state a trace passes through (posed as a problem): ``True`` if it is held out.
    held_out_state: Callable[[Problem], bool] | None = None

    def hold_out_states(self, held_out: Callable[[Problem], bool] | None) -> None:
        """Keep the statements ``held_out`` judges out of the states the training traces pass through.

        A task whose traces pose sub-problems of the same space (a Countdown search leaves a
        smaller Countdown problem after each step) must not show a held-out problem as a sub-step:
        its builder reads ``held_out_state`` and draws such an example again. A builder whose
        traces pose no other problem ignores it. :class:`SFTDataModule` calls this with its
        ``holdout``.
        """
        self.held_out_state = held_out


def default_examples(challenge_fraction: float | None, rival_mix: dict[str, float] | None) -> SFTExamples:
    """The builder registered as :data:`DEFAULT_EXAMPLES`, with the data module's shares
    (``challenge_fraction`` ``None``: 0.5; ``rival_mix`` ``None``: the builder's own).

    Raises:
        LookupError: Nothing is registered under that name in :data:`EXAMPLES_GROUP` (the
            installed metadata predates the group: reinstall the package).
    """
    found = entry_points(group=EXAMPLES_GROUP, name=DEFAULT_EXAMPLES)
    if not found:
        raise LookupError(
            f"no SFT examples are registered as {DEFAULT_EXAMPLES!r} in the entry-point group "
            f"{EXAMPLES_GROUP!r}: reinstall agon-lightning (pip install -e .), or give data.examples"
        )
    builder = next(iter(found)).load()
    return builder(0.5 if challenge_fraction is None else challenge_fraction, rival_mix)


def _collate(batch: list[SFTExample]) -> list[SFTExample]:
    return list(batch)


class SFTDataModule(ReasoningGymDataModule):
    """reasoning-gym problems as SFT examples, with held-out problems for greedy evaluation.

    Use the same ``tasks``, ``val_size`` and ``val_seed`` as the RL run, so the accuracy
    measured here is the RL run's starting validation accuracy; the SFT ``data_seed`` is
    chosen apart from RL's, and held-out questions are dropped from training.

    Args:
        challenge_fraction: For the default examples only (``None``: 0.5): see
            :class:`~agon_lightning.testbeds.chain_sum.sft.ArithmeticExamples`.
        rival_mix: For the default examples only: see ``ArithmeticExamples``.
        examples: The task's example builder (e.g.
            :class:`~agon_lightning.testbeds.countdown.sft.CountdownExamples`), which carries its
            own proportions; ``None``: the one registered as :data:`DEFAULT_EXAMPLES` (the
            chain_sum testbed's ``ArithmeticExamples``) with ``challenge_fraction`` and ``rival_mix``.
        train_tasks: Tasks the training problems come from (``None``: ``tasks``), e.g. more
            sizes than the held-out set; every held-out question (main and hard) is dropped.
        holdout: The held-out part of the space: no training problem is ever drawn from it (main
            and hard alike, whatever ``val_size`` and ``hard_size`` evaluate). Use the RL run's.
        (other args): As :class:`~agon_lightning.data.reasoning_gym.ReasoningGymDataModule`;
            the hard set is only held out from training here, never evaluated.
    """

    def __init__(
        self,
        tasks: dict[str, dict[str, Any]] | None = None,
        train_size: int = 100_000,
        val_size: int | None = 200,
        data_seed: int = 20_001,
        val_seed: int = 10_001,
        batch_size: int = 64,
        val_batch_size: int = 200,
        challenge_fraction: float | None = None,
        rival_mix: dict[str, float] | None = None,
        seed: int = 0,
        num_workers: int = 0,
        examples: SFTExamples | None = None,
        train_tasks: dict[str, dict[str, Any]] | None = None,
        hard_tasks: dict[str, dict[str, Any]] | None = None,
        hard_size: int = 200,
        hard_seed: int = 30_001,
        question_format: str | None = None,
        holdout: HashHoldout | None = None,
    ) -> None:
        super().__init__(
            tasks=tasks, train_size=train_size, val_size=val_size, data_seed=data_seed, val_seed=val_seed,
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers,
            hard_tasks=hard_tasks, hard_size=hard_size, hard_seed=hard_seed, question_format=question_format,
            holdout=holdout,
        )  # fmt: skip
        if examples is not None and (challenge_fraction is not None or rival_mix is not None):
            raise ValueError(
                f"challenge_fraction ({challenge_fraction}) and rival_mix ({rival_mix}) shape the "
                f"arithmetic examples; {type(examples).__name__} carries its own proportions"
            )
        self.examples = examples if examples is not None else default_examples(challenge_fraction, rival_mix)
        if holdout is not None:  # a held-out problem is not shown as a sub-step of a training trace either
            self.examples.hold_out_states(holdout.held_out)
        self.train_tasks = train_tasks

    def load_train(self) -> list[Problem]:
        if self.train_tasks is None:
            return super().load_train()
        if (
            self.holdout is not None
        ):  # the held-out part of the whole space, whichever size each set evaluates
            return training_problems(
                self.train_tasks, self.train_size, self.data_seed, self.question_format, self.holdout
            )
        held_out = {p.question for p in self.load_val()}
        problems = generate_problems(self.train_tasks, self.train_size, self.data_seed, self.question_format)
        return [p for p in problems if p.question not in held_out]

    def train_dataloader(self) -> DataLoader:
        # The order a plain shuffled loader with this seed hands out, resumable mid-epoch: a run resumed
        # from a checkpoint trains on the batches the uninterrupted run would have seen next.
        examples = ProblemDataset(self.examples.build(self.train_problems, self.seed))  # type: ignore[arg-type]  # a list dataset of any item
        return ResumableDataLoader(
            examples,
            batch_size=self.batch_size,
            sampler=GeneratorShuffleSampler(len(examples), self.seed),
            generator=torch.Generator().manual_seed(self.seed),  # its draws only seed workers, as before
            collate_fn=_collate,
            num_workers=self.num_workers,
            drop_last=True,
        )

    def val_dataloader(self) -> DataLoader:
        main = [p for p in self.val_problems if p.metadata.get(SPLIT) != "hard"]
        held_out = self.examples.evaluate(main, self.seed)
        return DataLoader(
            ProblemDataset(held_out),  # type: ignore[arg-type]
            batch_size=self.val_batch_size,
            collate_fn=_collate,
            num_workers=self.num_workers,
        )


# names defined here before they moved (moved.MOVED_NAMES), with a DeprecationWarning until moved.REMOVED_AFTER
__getattr__ = moved_names(__name__)
