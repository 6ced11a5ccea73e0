"""The data module every domain builds on: lists of :class:`Problem`, batched as lists.

A batch is a plain ``list[Problem]``: prompts are built by the module (they depend on the
role and, for the challenger, on the draft), so the data side stays tokenizer-free.

The training loader is resumable: its order is a pure function of ``(seed, epoch)`` and it
reports how many batches of the epoch it has handed out, so a run restarted from a
mid-epoch checkpoint sees exactly the batches an uninterrupted run would have seen next.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from agon_lightning.game.types import Problem


class ProblemDataset(Dataset):
    """A list of problems as a map-style dataset."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)

    def __len__(self) -> int:
        return len(self.problems)

    def __getitem__(self, index: int) -> Problem:
        return self.problems[index]


def collate_problems(batch: list[Problem]) -> list[Problem]:
    return list(batch)


class EpochShuffleSampler(Sampler[int]):
    """A permutation of ``range(size)`` that depends on ``(seed, epoch)`` only.

    ``RandomSampler(generator=g)`` draws epoch e's order from wherever ``g`` stands after
    epochs 0..e-1, so a resumed run cannot rebuild it; here any epoch's order is rebuilt on
    its own. Lightning calls :meth:`set_epoch` at the start of every epoch, as it does for
    ``DistributedSampler``.

    Args:
        size: Number of items.
        seed: Shuffling seed.
    """

    def __init__(self, size: int, seed: int = 0) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        self.size = size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        order = list(range(self.size))
        # A string seed is hashed with SHA-512: stable across processes and Python versions.
        random.Random(f"{self.seed}:{self.epoch}").shuffle(order)
        return iter(order)


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` whose position in the epoch is saved in Lightning checkpoints.

    Lightning saves ``state_dict()`` of every training loader that has one and calls
    ``load_state_dict()`` before iterating again on resume. The state is ``(epoch, batches
    handed out)``; after loading it, the next iteration of *that* epoch skips the batches
    already trained on (a checkpoint taken at the end of an epoch resumes into a fresh epoch,
    since Lightning has moved the sampler to the next epoch by then). Skipping happens after
    sampling, so it works with any sampler whose order depends only on its epoch, including
    Lightning's distributed wrappers. Skipped batches are still collated: cheap for problem
    lists, which is what this loader is for.

    :meth:`peek` shows the batch the next step will be handed (the module drafts it ahead with
    ``rollout.max_staleness`` >= 1); a batch peeked at but not yet handed out is not counted, so a
    checkpoint taken then resumes with it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handed_out = 0
        self._resume_at: tuple[int, int] | None = None
        self._batches: Iterator[tuple[int, Any]] | None = None  # the epoch being iterated, as (index, batch)
        self._peeked: list[tuple[int, Any]] = []

    def _epoch(self) -> int:
        return int(getattr(self.sampler, "epoch", 0))

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self._epoch(), "batches": self._handed_out}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume_at = (int(state["epoch"]), int(state["batches"]))

    def __iter__(self) -> Iterator[Any]:
        # A generator: nothing below runs until the first batch is requested, i.e. after
        # Lightning's set_epoch() for the epoch being iterated.
        resume, self._resume_at = self._resume_at, None
        skip = resume[1] if resume is not None and resume[0] == self._epoch() else 0
        self._handed_out = 0
        self._peeked = []
        self._batches = ((i, b) for i, b in enumerate(super().__iter__()) if i >= skip)
        while True:
            if self._peeked:
                index, batch = self._peeked.pop(0)
            else:
                try:
                    index, batch = next(self._batches)
                except StopIteration:
                    self._batches = None
                    return
            self._handed_out = index + 1
            yield batch

    def peek(self) -> Any | None:
        """The batch the iteration hands out next, without handing it out; ``None`` at the epoch's end."""
        if not self._peeked and self._batches is not None:
            try:
                self._peeked.append(next(self._batches))
            except StopIteration:
                return None
        return self._peeked[0][1] if self._peeked else None


class ProblemDataModule(L.LightningDataModule):
    """Base class: subclasses return train and validation problems.

    Args:
        batch_size: Problems per training step (P); each is expanded to N rollouts.
        val_batch_size: Problems per validation batch.
        seed: Seed for shuffling the training problems.
        num_workers: DataLoader workers (0 keeps problem generation in the main process).
    """

    def __init__(
        self, batch_size: int = 4, val_batch_size: int = 50, seed: int = 0, num_workers: int = 0
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if val_batch_size < 1:
            raise ValueError(f"val_batch_size must be >= 1, got {val_batch_size}")
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size
        self.seed = seed
        self.num_workers = num_workers
        self._train: list[Problem] | None = None
        self._val: list[Problem] | None = None

    @abstractmethod
    def load_train(self) -> list[Problem]:
        """All training problems."""

    @abstractmethod
    def load_val(self) -> list[Problem]:
        """The fixed held-out problems."""

    def load_splits(self) -> tuple[list[Problem], list[Problem]]:
        """Training and held-out problems, read once by :meth:`setup`."""
        return self.load_train(), self.load_val()

    def setup(self, stage: str | None = None) -> None:
        if self._train is None:
            self._train, self._val = self.load_splits()
            if not self._train:
                raise ValueError(f"{type(self).__name__} produced no training problems")

    @property
    def train_problems(self) -> list[Problem]:
        self.setup()
        return self._train  # type: ignore[return-value]

    @property
    def val_problems(self) -> list[Problem]:
        self.setup()
        return self._val  # type: ignore[return-value]

    def train_dataloader(self) -> DataLoader:
        # Each epoch's order is a function of (seed, epoch); the loader's position is checkpointed.
        return ResumableDataLoader(
            ProblemDataset(self.train_problems),
            batch_size=self.batch_size,
            sampler=EpochShuffleSampler(len(self.train_problems), self.seed),
            # Worker seeds come from this generator, not the global one, so starting an epoch
            # does not shift the global RNG stream that sampling rollouts draws from.
            generator=torch.Generator().manual_seed(self.seed),
            collate_fn=collate_problems,
            num_workers=self.num_workers,
            drop_last=True,
        )

    def _eval_loader(self) -> DataLoader:
        return DataLoader(
            ProblemDataset(self.val_problems),
            batch_size=self.val_batch_size,
            shuffle=False,
            # Starting an iterator draws a seed from this generator; without one it would come
            # from the global RNG, and a validation would shift the rollouts sampled after it.
            generator=torch.Generator().manual_seed(self.seed),
            collate_fn=collate_problems,
            num_workers=self.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader()

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader()

    def predict_dataloader(self) -> DataLoader:
        return self._eval_loader()


class SplitSourceDataModule(ProblemDataModule):
    """Base class for sources whose training and held-out problems come from one read:
    subclasses implement :meth:`load_splits` (which :meth:`setup` calls once)."""

    @abstractmethod
    def load_splits(self) -> tuple[list[Problem], list[Problem]]:
        """Training and held-out problems."""

    def load_train(self) -> list[Problem]:
        return self.train_problems

    def load_val(self) -> list[Problem]:
        return self.val_problems


def split_holdout(problems: list[Problem], val_size: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """Deterministically split off ``val_size`` problems (same seed → same split)."""
    if not 0 <= val_size < len(problems):
        raise ValueError(f"val_size must be in [0, {len(problems)}), got {val_size}")
    order = list(range(len(problems)))
    random.Random(seed).shuffle(order)
    val_idx = set(order[:val_size])
    train = [p for i, p in enumerate(problems) if i not in val_idx]
    val = [p for i, p in enumerate(problems) if i in val_idx]
    return train, val
