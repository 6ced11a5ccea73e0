"""Problems from a ``datasets`` object in memory: the Python path for a TRL user's dataset.

A script holding a ``datasets.Dataset`` — what TRL's ``GRPOTrainer(train_dataset=...)`` takes —
trains on it without writing it to a file. Each row becomes a :class:`Problem` through the code
that reads a file's rows (:func:`~agon_lightning.data.files.problem_rows`), so the columns read,
the automatic choices (``prompt`` else ``question``; ``answer`` else ``solution``) and the errors
are those of :class:`~agon_lightning.data.files.FileProblemDataModule`.

Held-out problems come, in this order, from ``eval_dataset``, from a ``validation`` or ``test``
split of a ``DatasetDict``, or from ``val_size`` rows split off the training set. A streamed
``IterableDataset`` is read into memory up to ``max_rows`` rows; a longer one is an error, never a
silent cut. The class takes objects, not paths, so it is for Python: ``agon fit`` reads files and
Hub ids through ``FileProblemDataModule`` (``--data=files``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from agon_lightning.data.base import SplitSourceDataModule, TooLong, split_holdout
from agon_lightning.data.files import ProblemFields, problem_rows, problems_of
from agon_lightning.data.reader import EVAL_SPLITS, RawRow, dataset_rows, pick_split
from agon_lightning.game.types import Problem
from agon_lightning.infra.errors import UsageError

ACCEPTED = "a datasets.Dataset, IterableDataset, DatasetDict or IterableDatasetDict"


def check_dataset(dataset: Any, name: str) -> Any:
    """``dataset`` when it is a ``datasets`` object this module reads.

    Raises:
        TypeError: it is anything else (the message says how to make one from a list of rows).
    """
    import datasets

    single = (datasets.Dataset, datasets.IterableDataset)
    if isinstance(dataset, single):
        return dataset
    if isinstance(dataset, Mapping) and dataset and all(isinstance(d, single) for d in dataset.values()):
        return dataset
    raise TypeError(
        f"{name} must be {ACCEPTED}, got {type(dataset).__name__}; "
        "a list of row dicts becomes one with datasets.Dataset.from_list(rows)"
    )


def capped(rows: Iterator[RawRow], where: str, max_rows: int) -> Iterator[RawRow]:
    """``rows`` of a streamed dataset, refusing more than ``max_rows`` of them.

    Raises:
        UsageError: there are more than ``max_rows`` rows.
    """
    for count, row in enumerate(itertools.islice(rows, max_rows + 1), start=1):
        if count > max_rows:
            raise UsageError(
                f"{where} is an IterableDataset of more than max_rows={max_rows} rows, read into memory "
                "before training; train on part of it with .take(n), or raise max_rows"
            )
        yield row


class DatasetDataModule(SplitSourceDataModule):
    """Problems from a ``datasets.Dataset`` (or ``DatasetDict``, ``IterableDataset``) in TRL's format.

    Args:
        train_dataset: Training rows: a ``Dataset``, an ``IterableDataset``, or a ``DatasetDict``
            (``IterableDatasetDict``) read at ``split``.
        eval_dataset: Held-out rows, of the same kinds (a dict at its ``validation`` or ``test``
            split). ``None``: ``train_dataset``'s ``validation`` or ``test`` split when it is a
            dict that has one, else ``val_size`` rows split off the training rows.
        val_size: Held-out problems split off the training rows when neither of the above gives
            any (0: no validation).
        split: Training split of a dict ``train_dataset``.
        fields: Which column is the prompt, the gold answer and a metadata object (default:
            ``prompt`` else ``question``; ``answer`` else ``solution``; ``metadata``); every other
            column is in ``Problem.metadata`` under its own name.
        split_seed: Seed of the held-out split.
        max_rows: Most rows read from an ``IterableDataset`` (it is read into memory); one with
            more is an error.
        batch_size: Problems per training step (P).
        val_batch_size: Problems per validation (and prediction) batch.
        seed: Seed for shuffling the training problems.
        num_workers: DataLoader workers.
        too_long: Problems whose prompt leaves no room for the completion in the model's context:
            ``drop`` (counted in the log) or ``error`` (see :class:`ProblemDataModule`).

    Raises:
        TypeError: a dataset of another kind.
        ValueError: ``val_size`` < 0, or held-out problems from two places at once.
    """

    def __init__(
        self,
        train_dataset: Any,
        eval_dataset: Any = None,
        val_size: int = 0,
        split: str = "train",
        fields: ProblemFields = ProblemFields(),
        split_seed: int = 0,
        max_rows: int = 100_000,
        batch_size: int = 4,
        val_batch_size: int = 50,
        seed: int = 0,
        num_workers: int = 0,
        too_long: TooLong = "drop",
    ) -> None:
        super().__init__(
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers,
            too_long=too_long,
        )  # fmt: skip
        if val_size < 0:
            raise ValueError(f"val_size must be >= 0, got {val_size}")
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.train_dataset = check_dataset(train_dataset, "train_dataset")
        if isinstance(self.train_dataset, Mapping):
            pick_split(self.train_dataset, split, "train_dataset")  # a missing split fails here, not at setup
        self.eval_dataset = None if eval_dataset is None else check_dataset(eval_dataset, "eval_dataset")
        self.split = split
        held_out = self._eval_split()
        if val_size and (eval_dataset is not None or held_out is not None):
            given = "eval_dataset" if eval_dataset is not None else f"train_dataset's {held_out!r} split"
            raise ValueError(
                f"give val_size ({val_size}) or held-out rows ({given}), not both; to split the training "
                f"rows instead, pass train_dataset[{split!r}]"
            )
        self.val_size = val_size
        self.fields = fields
        self.split_seed = split_seed
        self.max_rows = max_rows

    def _eval_split(self) -> str | None:
        """The split of a dict ``train_dataset`` that holds the held-out rows, when one does."""
        if self.eval_dataset is not None or not isinstance(self.train_dataset, Mapping):
            return None
        return next((s for s in EVAL_SPLITS if s in self.train_dataset and s != self.split), None)

    def _problems(
        self, dataset: Any, where: str, split: str | None, fallback: tuple[str, ...] = ()
    ) -> list[Problem]:
        """The problems of ``dataset`` (of a dict, at ``split`` or the first of ``fallback`` it has)."""
        if isinstance(dataset, Mapping):
            split, dataset = pick_split(dataset, split, where, fallback)
            where = f"{where}[{split}]"
        rows = dataset_rows(dataset, where)
        if not hasattr(dataset, "__len__"):  # streamed: read into memory, within max_rows
            rows = capped(rows, where, self.max_rows)
        return problems_of(problem_rows(rows, self.fields), where)

    def load_splits(self) -> tuple[list[Problem], list[Problem]]:
        problems = self._problems(self.train_dataset, "train_dataset", self.split)
        eval_split = self._eval_split()
        if self.eval_dataset is not None:
            val = self._problems(self.eval_dataset, "eval_dataset", None, EVAL_SPLITS)
        elif eval_split is not None:
            val = self._problems(self.train_dataset, "train_dataset", eval_split)
        else:
            problems, val = split_holdout(
                problems, self.val_size, self.split_seed, "train_dataset", self.option("val_size")
            )
        rank_zero_info(f"DatasetDataModule: {len(problems)} training and {len(val)} held-out problems")
        return problems, val
