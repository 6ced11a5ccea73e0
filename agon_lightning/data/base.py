"""The data module every domain builds on: lists of :class:`Problem`, batched as lists.

A batch is a plain ``list[Problem]``: prompts are built by the module (they depend on the
role and, for the challenger, on the draft), so the data side stays tokenizer-free.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from collections.abc import Sequence

import lightning as L
from torch.utils.data import DataLoader, Dataset

from agon_lightning.types import Problem


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

    def setup(self, stage: str | None = None) -> None:
        if self._train is None:
            self._train = self.load_train()
            self._val = self.load_val()
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
        # Shuffle once per epoch from a seeded generator: same data order for the same seed.
        import torch

        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(
            ProblemDataset(self.train_problems),
            batch_size=self.batch_size,
            shuffle=True,
            generator=generator,
            collate_fn=collate_problems,
            num_workers=self.num_workers,
            drop_last=True,
        )

    def _eval_loader(self) -> DataLoader:
        return DataLoader(
            ProblemDataset(self.val_problems),
            batch_size=self.val_batch_size,
            shuffle=False,
            collate_fn=collate_problems,
            num_workers=self.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader()

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader()

    def predict_dataloader(self) -> DataLoader:
        return self._eval_loader()


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
