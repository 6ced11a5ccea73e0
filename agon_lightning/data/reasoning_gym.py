"""Procedural problems from reasoning-gym: unlimited, offline, with exact scorers.

The training set and the held-out set are generated from different seeds, and any
held-out question that also appears in training is dropped from training. An optional *hard*
held-out set (``hard_tasks``, e.g. more terms than training ever shows) is evaluated beside
the main one and reported as ``val/hard/...``.

With a ``holdout`` (:class:`~agon_lightning.data.holdout.HashHoldout`) the split is the problem's
own instead: training draws only problems outside the held-out part of the space (``train_size``
of them), and each held-out set is ``val_size`` (``hard_size``) *distinct* problems of the
held-out part, in hash order. A task whose space is enumerable
(:data:`~agon_lightning.data.statements.SPACES`: Countdown) takes them from the whole space, so
``val_size: null`` evaluates every held-out problem; any other task draws from its generator
until it has them.
"""

from __future__ import annotations

from typing import Any

from agon_lightning.data.base import ProblemDataModule, TooLong
from agon_lightning.data.holdout import HashHoldout, distinct
from agon_lightning.data.statements import SPACES, pose
from agon_lightning.game.types import SPLIT, Problem

# Draws per held-out problem wanted before a generator that will not give enough is given up on.
MAX_DRAWS_PER_PROBLEM = 200


def generate_problems(
    tasks: dict[str, dict[str, Any]], size: int, seed: int, question_format: str | None = None
) -> list[Problem]:
    """``size`` problems spread evenly over ``tasks`` (name → reasoning-gym config kwargs).

    ``question_format`` (e.g. ``"Make {target} from {numbers}"``) replaces each generated
    question by a statement built from the entry's metadata
    (:func:`~agon_lightning.data.statements.pose`); ``None`` keeps reasoning-gym's own wording.
    """
    import reasoning_gym

    if not tasks:
        raise ValueError("tasks must name at least one reasoning-gym dataset")
    problems: list[Problem] = []
    names = sorted(tasks)
    for k, name in enumerate(names):
        count = size // len(names) + (1 if k < size % len(names) else 0)
        if count == 0:
            continue
        try:
            dataset = reasoning_gym.create_dataset(name, size=count, seed=seed + k, **tasks[name])
        except Exception as err:
            raise ValueError(
                f"reasoning-gym could not build task {name!r} with {tasks[name]!r}: {err}"
            ) from err
        for entry in dataset:
            problems.append(
                Problem(
                    question=entry["question"] if question_format is None else pose(question_format, entry),
                    answer=str(entry["answer"]),
                    metadata={"task": name, "entry": entry},
                )
            )
    return problems


def held_out_problems(
    tasks: dict[str, dict[str, Any]],
    size: int | None,
    seed: int,
    question_format: str | None,
    holdout: HashHoldout,
) -> list[Problem]:
    """``size`` distinct problems of the held-out part of ``tasks``' space (``None``: all of it),
    spread evenly over the tasks, each task's in hash order.

    Raises:
        ValueError: ``None`` for a task whose space is not enumerable, or a generator that gives
            fewer distinct held-out problems than asked within its draws.
    """
    names = sorted(tasks)
    out: list[Problem] = []
    for k, name in enumerate(names):
        want = None if size is None else size // len(names) + (1 if k < size % len(names) else 0)
        if want == 0:
            continue
        if name in SPACES and question_format is not None:
            pool = [p for p in SPACES[name](tasks[name], question_format) if holdout.held_out(p)]
            pool = distinct(pool, holdout)
            if want is not None and want > len(pool):
                raise ValueError(
                    f"{name}'s held-out part has {len(pool)} distinct problems; {want} were asked"
                )
            out += pool[:want]
            continue
        if want is None:
            raise ValueError(f"{name}'s space cannot be listed (enumerable: {sorted(SPACES)}); give a size")
        draws = 4 * want
        while True:
            drawn = [p for p in generate_problems({name: tasks[name]}, draws, seed + k, question_format)
                     if holdout.held_out(p)]  # fmt: skip
            found = distinct(drawn, holdout)
            if len(found) >= want or draws >= MAX_DRAWS_PER_PROBLEM * want:
                break
            draws *= 4
        if len(found) < want:
            raise ValueError(
                f"{name}: {draws} draws gave {len(found)} distinct held-out problems, {want} were asked; "
                f"lower the size or raise the holdout fraction ({holdout.fraction})"
            )
        out += found[:want]
    return out


def training_problems(
    tasks: dict[str, dict[str, Any]], size: int, seed: int, question_format: str | None, holdout: HashHoldout
) -> list[Problem]:
    """The first ``size`` draws of ``tasks`` outside the held-out part (drawing more as needed)."""
    draws = int(size / (1 - holdout.fraction) * 1.1) + 16
    while True:
        kept = [p for p in generate_problems(tasks, draws, seed, question_format) if not holdout.held_out(p)]
        if len(kept) >= size:
            return kept[:size]
        if draws > 20 * size:
            raise ValueError(f"{draws} draws of {sorted(tasks)} gave {len(kept)} problems outside the "
                             f"held-out part ({holdout}); {size} were asked")  # fmt: skip
        draws *= 2


class ReasoningGymDataModule(ProblemDataModule):
    """Problems from reasoning-gym tasks.

    Args:
        tasks: reasoning-gym dataset name → keyword config (e.g. ``{"chain_sum":
            {"min_terms": 2, "max_terms": 3}}``).
        train_size: Training problems per epoch.
        val_size: Held-out problems (fixed, from ``val_seed``).
        data_seed: Seed for generating the training problems.
        val_seed: Seed for generating the held-out problems; must differ from ``data_seed``.
        hard_tasks: Tasks of a second held-out set, reported as ``val/hard/...`` (``None``: none).
        hard_size: Problems in the hard set.
        hard_seed: Seed of the hard set; must differ from the other two.
        question_format: A statement built from each entry's metadata in place of
            reasoning-gym's wording (see :func:`~agon_lightning.data.statements.pose`); ``None``
            keeps the wording.
        holdout: The held-out part of the space (:class:`~agon_lightning.data.holdout.HashHoldout`):
            training never draws from it, and ``val_size`` / ``hard_size`` count distinct problems
            of it (``val_size: null``: all of it, for an enumerable task). ``None``: the held-out
            sets are draws from their own seeds, their statements dropped from training.
        too_long: Problems whose prompt leaves no room for the completion in the model's context:
            ``drop`` (counted in the log) or ``error`` (see :class:`~agon_lightning.data.base.ProblemDataModule`).
    """

    def __init__(
        self,
        tasks: dict[str, dict[str, Any]] | None = None,
        train_size: int = 2000,
        val_size: int | None = 200,
        data_seed: int = 1,
        val_seed: int = 10_001,
        batch_size: int = 4,
        val_batch_size: int = 100,
        seed: int = 0,
        num_workers: int = 0,
        hard_tasks: dict[str, dict[str, Any]] | None = None,
        hard_size: int = 200,
        hard_seed: int = 30_001,
        question_format: str | None = None,
        holdout: HashHoldout | None = None,
        too_long: TooLong = "drop",
    ) -> None:
        super().__init__(
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers,
            too_long=too_long,
        )  # fmt: skip
        if data_seed == val_seed:
            raise ValueError(f"val_seed must differ from data_seed (both {data_seed})")
        if hard_tasks is not None and hard_seed in (data_seed, val_seed):
            raise ValueError(f"hard_seed must differ from data_seed and val_seed, got {hard_seed}")
        if hard_tasks is not None and hard_size < 1:
            raise ValueError(f"hard_size must be >= 1 when hard_tasks is set, got {hard_size}")
        if train_size < batch_size:
            raise ValueError(f"train_size ({train_size}) must be at least batch_size ({batch_size})")
        self.tasks = tasks if tasks is not None else {"chain_sum": {}}
        self.train_size = train_size
        self.val_size = val_size
        self.data_seed = data_seed
        self.val_seed = val_seed
        self.hard_tasks = hard_tasks
        self.hard_size = hard_size
        self.hard_seed = hard_seed
        self.question_format = question_format
        if val_size is None and holdout is None:
            raise ValueError("val_size: null (every held-out problem) needs a holdout")
        self.holdout = holdout

    def _held_out(self, tasks: dict[str, dict[str, Any]], size: int | None, seed: int) -> list[Problem]:
        if self.holdout is None:
            return generate_problems(tasks, size or 0, seed, self.question_format)
        return held_out_problems(tasks, size, seed, self.question_format, self.holdout)

    def load_val(self) -> list[Problem]:
        """The main held-out set, then the hard one (each hard problem tagged ``split: hard``)."""
        problems = self._held_out(self.tasks, self.val_size, self.val_seed)
        if self.hard_tasks is not None:
            hard = self._held_out(self.hard_tasks, self.hard_size, self.hard_seed)
            for p in hard:
                p.metadata[SPLIT] = "hard"
            problems += hard
        return problems

    def load_train(self) -> list[Problem]:
        if self.holdout is not None:
            return training_problems(
                self.tasks, self.train_size, self.data_seed, self.question_format, self.holdout
            )
        held_out = {p.question for p in self.load_val()}
        return [
            p
            for p in generate_problems(self.tasks, self.train_size, self.data_seed, self.question_format)
            if p.question not in held_out
        ]
