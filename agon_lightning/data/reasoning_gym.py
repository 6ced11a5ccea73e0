"""Procedural problems from reasoning-gym: unlimited, offline, with exact scorers.

The training set and the held-out set are generated from different seeds, and any
held-out question that also appears in training is dropped from training. An optional *hard*
held-out set (``hard_tasks``, e.g. more terms than training ever shows) is evaluated beside
the main one and reported as ``val/hard/...``.
"""

from __future__ import annotations

import re
from typing import Any

from agon_lightning.data.base import ProblemDataModule
from agon_lightning.types import SPLIT, Problem


def pose(template: str, entry: dict[str, Any]) -> str:
    """``template`` with each ``{field}`` replaced by that field of the entry's metadata.

    A list is written sorted, space-separated (``{numbers}`` → ``3 8 9``): a problem then has one
    statement whatever order the generator shuffled its numbers into, so the held-out filter,
    which compares statements, catches every ordering of a held-out problem.

    Raises:
        ValueError: When the template names a field the entry does not have.
    """
    meta = entry.get("metadata", {})

    def field(match: re.Match[str]) -> str:
        if match[1] not in meta:
            raise ValueError(
                f"question_format {template!r} names {{{match[1]}}}, which is not in the entry's "
                f"metadata (fields: {sorted(meta)})"
            )
        value = meta[match[1]]
        return " ".join(map(str, sorted(value))) if isinstance(value, (list, tuple)) else str(value)

    return re.sub(r"\{(\w+)\}", field, template)


def generate_problems(
    tasks: dict[str, dict[str, Any]], size: int, seed: int, question_format: str | None = None
) -> list[Problem]:
    """``size`` problems spread evenly over ``tasks`` (name → reasoning-gym config kwargs).

    ``question_format`` (e.g. ``"Make {target} from {numbers}"``) replaces each generated
    question by a statement built from the entry's metadata (:func:`pose`); ``None`` keeps
    reasoning-gym's own wording.
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
            reasoning-gym's wording (see :func:`pose`); ``None`` keeps the wording.
    """

    def __init__(
        self,
        tasks: dict[str, dict[str, Any]] | None = None,
        train_size: int = 2000,
        val_size: int = 200,
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
    ) -> None:
        super().__init__(
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers
        )
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

    def load_val(self) -> list[Problem]:
        """The main held-out set, then the hard one (each hard problem tagged ``split: hard``)."""
        problems = generate_problems(self.tasks, self.val_size, self.val_seed, self.question_format)
        if self.hard_tasks is not None:
            hard = generate_problems(self.hard_tasks, self.hard_size, self.hard_seed, self.question_format)
            for p in hard:
                p.metadata[SPLIT] = "hard"
            problems += hard
        return problems

    def load_train(self) -> list[Problem]:
        held_out = {p.question for p in self.load_val()}
        return [
            p
            for p in generate_problems(self.tasks, self.train_size, self.data_seed, self.question_format)
            if p.question not in held_out
        ]
