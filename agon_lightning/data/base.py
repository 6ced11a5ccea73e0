"""The data module every domain builds on: lists of :class:`Problem`, batched as lists.

A batch is a plain ``list[Problem]``: prompts are built by the module (they depend on the
role and, for the challenger, on the draft), so the data side stays tokenizer-free.

The training loader is resumable: its order is a pure function of ``(seed, epoch)`` and it
reports how many batches of the epoch it has handed out, so a run restarted from a
mid-epoch checkpoint sees exactly the batches an uninterrupted run would have seen next.
"""

from __future__ import annotations

import inspect
import math
import random
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, get_args

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from agon_lightning.data.lengths import draft_prompt_lengths, keep_fitting, model_budget
from agon_lightning.game.types import Problem
from agon_lightning.infra.errors import UsageError

TooLong = Literal["drop", "error"]


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


class GeneratorShuffleSampler(EpochShuffleSampler):
    """Epoch ``e``'s order of ``DataLoader(shuffle=True, generator=torch.Generator().manual_seed(seed))``, from ``(seed, e)`` alone.

    Such a loader draws each epoch's permutation from where its generator stands after the
    epochs before it (each epoch one draw for its workers' base seed, the permutation, and one more
    permutation that ``RandomSampler`` draws for an empty remainder once the epoch is read out), so a
    run resumed mid-epoch cannot rebuild the order; this sampler replays those draws for the
    epoch Lightning sets. A loader that moves to it keeps the order it had, and with
    :class:`ResumableDataLoader` a resumed run continues it.

    Args:
        size: Number of items.
        seed: The seed the plain loader's generator had.
    """

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed)
        # Each epoch before this one: its base seed, its order, and the empty remainder's order.
        for _ in range(self.epoch):
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            torch.randperm(self.size, generator=generator)
            torch.randperm(self.size, generator=generator)
        torch.empty((), dtype=torch.int64).random_(generator=generator)  # the loader's base-seed draw
        return iter(torch.randperm(self.size, generator=generator).tolist())


def restore_loader_position(checkpoint: dict[str, Any]) -> bool:
    """Give a checkpoint written without its training loader's position the one its progress counters hold.

    A run whose loader kept no state (before it was a :class:`ResumableDataLoader`) still records
    the epoch it was in and the batches it had trained on; written as the loader's state, a resume
    continues the epoch instead of starting it over. Returns whether the checkpoint was given one.
    """
    loop = checkpoint.get("loops", {}).get("fit_loop")
    if not loop or loop.get("state_dict", {}).get("combined_loader") is not None:
        return False
    try:
        epoch = int(loop["epoch_progress"]["current"]["processed"])
        batches = int(loop["epoch_loop.batch_progress"]["current"]["processed"])
    except (KeyError, TypeError, ValueError):
        return False
    loop.setdefault("state_dict", {})["combined_loader"] = [{"epoch": epoch, "batches": batches}]
    return True


def reopen_stopped_epoch(checkpoint: dict[str, Any], epoch_batches: float) -> bool:
    """Write a run stopped inside an epoch as being inside it, so a resume trains on the epoch's other batches.

    A fit that stops before its epoch's last batch (``max_steps``, ``max_time``, a callback's
    ``should_stop``) is marked by Lightning as having finished that epoch; a checkpoint written
    after that (``AgonCheckpoint``'s at the end of training, or ``trainer.save_checkpoint`` after
    ``fit``) resumed into the next epoch, and the rest of the stopped one was never trained on. In
    that case (``epoch_batches``: the batches an epoch runs, ``trainer.num_training_batches``)
    the epoch's progress is set back to "started", as a checkpoint taken after any batch inside an
    epoch holds it; the batch counters and the loader's place stay. Returns whether it was.
    """
    loop = checkpoint.get("loops", {}).get("fit_loop")
    try:
        epochs, batches = loop["epoch_progress"], loop["epoch_loop.batch_progress"]
        started, completed = int(epochs["current"]["started"]), int(epochs["current"]["completed"])
        trained = int(batches["current"]["completed"])
        last = bool(batches["is_last_batch"])
    except (KeyError, TypeError, ValueError):
        return False
    if last or completed != started or completed < 1 or not 0 < trained < epoch_batches:
        return False
    for counters in (epochs["current"], epochs["total"]):
        counters["processed"] = counters["completed"] = int(counters["completed"]) - 1
    checkpoint["epoch"] = completed - 1  # what ``trainer.current_epoch`` will be on resume
    return True


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

    Before a run starts, the data is checked at the door: a training set that fills no batch is
    refused (:meth:`check_batch`), and the module training on it measures every prompt against the
    model's context (:meth:`fit_prompts`), before the model loads.

    Args:
        batch_size: Problems per training step (P); each is expanded to N rollouts.
        val_batch_size: Problems per validation batch.
        seed: Seed for shuffling the training problems.
        num_workers: DataLoader workers (0 keeps problem generation in the main process).
        too_long: A problem whose prompt leaves no room for the completion budget in the model's
            context: ``drop`` leaves it out and says how many in the log; ``error`` refuses the
            data. Never truncated.
    """

    def __init__(
        self,
        batch_size: int = 4,
        val_batch_size: int = 50,
        seed: int = 0,
        num_workers: int = 0,
        too_long: TooLong = "drop",
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if val_batch_size < 1:
            raise ValueError(f"val_batch_size must be >= 1, got {val_batch_size}")
        if too_long not in get_args(TooLong):
            raise ValueError(f"too_long must be one of {get_args(TooLong)}, got {too_long!r}")
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size
        self.seed = seed
        self.num_workers = num_workers
        self.too_long = too_long
        self._train: list[Problem] | None = None
        self._val: list[Problem] | None = None
        self._origins: dict[str, str] = {}

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
                raise UsageError(f"{self.describe()} produced no training problems")
        if stage == "fit":
            self.check_batch()

    # ------------------------------------------------------------------ checks at the door
    def describe(self) -> str:
        """The source, for messages (subclasses add their file or dataset to the class name)."""
        return type(self).__name__

    def set_origins(self, origins: Mapping[str, str]) -> None:
        """Where options' values came from (``{"val_size": "set in configs/agon.yaml"}``), for messages.

        The CLI, which knows the command line and the config files, tells; a value without an
        origin is said to be the class's default when it equals it.
        """
        self._origins.update(origins)

    def option(self, name: str) -> str:
        """``data.NAME=VALUE`` and where the value came from, where known: what a message names."""
        value = getattr(self, name)
        origin = self._origins.get(name)
        if origin is None:
            parameter = inspect.signature(type(self)).parameters.get(name)
            if parameter is not None and parameter.default == value:
                origin = f"the default of {type(self).__name__}"
        return f"data.{name}={value}" + (f" ({origin})" if origin else "")

    def check_batch(self) -> None:
        """Refuse training problems too few for one batch on each device.

        The training loader drops an incomplete last batch (every step takes ``batch_size``
        problems), so such a run would take no step and save nothing.

        Raises:
            UsageError: fewer training problems per device than ``batch_size``.
        """
        train, val = self.train_problems, self.val_problems
        devices = max(1, int(getattr(self.trainer, "world_size", 1) or 1))
        per_device = math.ceil(len(train) / devices)
        if per_device >= self.batch_size:
            return
        if hasattr(self, "val_size"):
            counted = f"{_count(len(train), 'training problem')} left after {self.option('val_size')} held out {len(val)}"
        else:
            counted = f"{_count(len(train), 'training problem')} ({len(val)} held out)"
        spread = f", {per_device} on each of {devices} devices" if devices > 1 else ""
        fewer = ", hold out fewer" if val and hasattr(self, "val_size") else ""
        raise UsageError(
            f"{self.describe()}: {counted}{spread}, fewer than one batch of {self.option('batch_size')}: "
            f"the run would take no step; set --data.batch_size to at most {per_device}{fewer}, or add problems"
        )

    def fit_prompts(
        self,
        stage: str,
        model_path: str,
        draft_prompt: Callable[[Any, Problem], str],
        max_new_tokens: int,
        max_model_len: int | None = None,
    ) -> None:
        """Leave out (``too_long: drop``) or refuse (``error``) the problems whose drafter prompt leaves
        no room for ``max_new_tokens`` in the model's context — the training problems for ``fit``, the
        held-out ones for ``fit``, ``validate`` and ``test`` — then :meth:`check_batch` again for ``fit``.

        Reads the model's config and tokenizer only: no weights (:mod:`agon_lightning.data.lengths`).

        Args:
            stage: Lightning's stage.
            model_path: The model's directory or Hub id.
            draft_prompt: Builds the drafter's prompt from the tokenizer and a problem
                (``Prompts.draft_prompt``).
            max_new_tokens: The completion budget.
            max_model_len: A rollout backend's own limit on prompt + completion (``None``: none).

        Raises:
            UsageError: a prompt too long with ``too_long: error``, or every prompt of a set too long.
        """
        sets = {"fit": ("train", "val"), "validate": ("val",), "test": ("val",)}.get(stage, ())
        budget = model_budget(model_path, max_new_tokens, max_model_len) if sets else None
        if budget is None:
            return
        from transformers import AutoTokenizer

        lengths = draft_prompt_lengths(AutoTokenizer.from_pretrained(model_path), draft_prompt)
        if "train" in sets:
            what = f"training problems of {self.describe()}"
            self._train = keep_fitting(self.train_problems, lengths, budget, self.too_long, what)
        if "val" in sets and self.val_problems:
            what = f"held-out problems of {self.describe()}"
            self._val = keep_fitting(self.val_problems, lengths, budget, self.too_long, what)
        if stage == "fit":
            self.check_batch()

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


def _count(n: int, noun: str) -> str:
    """``1 training problem is``, ``2 training problems are``."""
    return f"{n} {noun} is" if n == 1 else f"{n} {noun}s are"


def split_holdout(
    problems: list[Problem], val_size: int, seed: int, where: str = "the source", option: str | None = None
) -> tuple[list[Problem], list[Problem]]:
    """Deterministically split off ``val_size`` problems (same seed → same split).

    Args:
        problems: Every problem of the source.
        val_size: How many to hold out.
        seed: Seed of the split.
        where: The source, for the message.
        option: How the message names ``val_size`` (default ``val_size=VALUE``): the option and
            where its value came from.

    Raises:
        UsageError: ``val_size`` is negative or leaves no problem to train on.
    """
    if not 0 <= val_size < len(problems):
        raise UsageError(
            f"{option or f'val_size={val_size}'} leaves no problem to train on: {where} holds {len(problems)}; "
            f"set --data.val_size to at most {max(len(problems) - 1, 0)} (0: no validation)"
        )
    order = list(range(len(problems)))
    random.Random(seed).shuffle(order)
    val_idx = set(order[:val_size])
    train = [p for i, p in enumerate(problems) if i not in val_idx]
    val = [p for i, p in enumerate(problems) if i in val_idx]
    return train, val
