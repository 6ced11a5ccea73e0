"""DeepMath-103K problems, filtered to a difficulty band (the paper's "hard" split).

DeepMath-103K (``zwhe99/DeepMath-103K``) has one ``train`` split with ``question``,
``final_answer``, ``difficulty`` (AoPS-style 1–10 in steps of 0.5), ``topic`` (``"Mathematics
-> Calculus -> Integral Calculus"``) and three R1 solutions. There is no official hard split;
``difficulty >= 7`` (about 7k problems) is the common cut and our default. A few rows carry
noise difficulties (below 1, missing); they are dropped rather than guessed at.

Only the four columns we use are read: the R1 solutions are most of the dataset's bytes.
The held-out problems are a seeded sample of the filtered rows, so the same source, filters
and seed always give the same split on every rank.
"""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path
from typing import Any

from agon_lightning.data import reader
from agon_lightning.data.base import SplitSourceDataModule, split_holdout
from agon_lightning.types import Problem

log = logging.getLogger(__name__)

HUB_ID = "zwhe99/DeepMath-103K"
COLUMNS = ("question", "final_answer", "difficulty", "topic")
LOCAL_SUFFIXES = (".parquet", ".jsonl")


def read_rows(source: str, split: str = "train") -> list[dict[str, Any]]:
    """Rows (our four columns) from a local Parquet/JSONL file or folder, else a Hub dataset id."""
    return reader.read_rows(source, split, columns=COLUMNS, suffixes=LOCAL_SUFFIXES)


def valid_difficulty(value: Any) -> float | None:
    """``value`` as a float when it is a real difficulty in [1, 10], else ``None``."""
    if isinstance(value, bool):
        return None
    try:
        difficulty = float(value)
    except (TypeError, ValueError):
        return None
    return difficulty if math.isfinite(difficulty) and 1.0 <= difficulty <= 10.0 else None


def select_problems(
    rows: list[dict[str, Any]],
    min_difficulty: float | None = 7.0,
    max_difficulty: float | None = None,
    topics: list[str] | None = None,
) -> list[Problem]:
    """Problems from rows with a valid difficulty in the band and a topic under one of ``topics``.

    A topic filter matches by prefix, so ``"Mathematics -> Algebra"`` keeps every algebra
    sub-topic. Rows with an empty question or answer are dropped with the invalid ones.
    """
    problems: list[Problem] = []
    invalid = 0
    for index, row in enumerate(rows):
        difficulty = valid_difficulty(row.get("difficulty"))
        question, answer = (row.get("question") or "").strip(), (row.get("final_answer") or "").strip()
        if difficulty is None or not question or not answer:
            invalid += 1
            continue
        topic = row.get("topic") or ""
        if min_difficulty is not None and difficulty < min_difficulty:
            continue
        if max_difficulty is not None and difficulty > max_difficulty:
            continue
        if topics and not any(topic.startswith(t) for t in topics):
            continue
        metadata = {"index": index, "difficulty": difficulty, "topic": topic}
        problems.append(Problem(question=question, answer=answer, metadata=metadata))
    if invalid:
        log.warning(
            "DeepMath: dropped %d of %d rows with an invalid difficulty or an empty field", invalid, len(rows)
        )
    return problems


class DeepMathDataModule(SplitSourceDataModule):
    """DeepMath-103K problems in a difficulty band, with a fixed held-out split.

    Args:
        source: Hub dataset id, or a local Parquet/JSONL file or a folder of them in the
            DeepMath schema.
        split: Hub split to read (DeepMath has only ``train``).
        min_difficulty: Keep rows with ``difficulty >= min_difficulty`` (7.0: the hard split;
            ``None``: no lower bound).
        max_difficulty: Keep rows with ``difficulty <= max_difficulty`` (``None``: no bound).
        topics: Keep rows whose topic starts with one of these (``None``: all topics).
        val_size: Held-out problems, sampled from the filtered rows.
        split_seed: Seed of the held-out sample.
        max_train: Use a seeded sample of at most this many training problems (``None``: all).
    """

    def __init__(
        self,
        source: str = HUB_ID,
        split: str = "train",
        min_difficulty: float | None = 7.0,
        max_difficulty: float | None = None,
        topics: list[str] | None = None,
        val_size: int = 200,
        split_seed: int = 1234,
        max_train: int | None = None,
        batch_size: int = 4,
        val_batch_size: int = 50,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__(
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers
        )
        if min_difficulty is not None and max_difficulty is not None and min_difficulty > max_difficulty:
            raise ValueError(
                f"min_difficulty ({min_difficulty}) must be <= max_difficulty ({max_difficulty})"
            )
        if val_size < 0:
            raise ValueError(f"val_size must be >= 0, got {val_size}")
        if max_train is not None and max_train < batch_size:
            raise ValueError(f"max_train ({max_train}) must be at least batch_size ({batch_size})")
        self.source = source
        self.split = split
        self.min_difficulty = min_difficulty
        self.max_difficulty = max_difficulty
        self.topics = topics
        self.val_size = val_size
        self.split_seed = split_seed
        self.max_train = max_train

    def prepare_data(self) -> None:
        # Called on one process per node: download a Hub dataset into the cache once.
        if not Path(self.source).expanduser().exists():
            reader.load_hub(self.source, self.split, columns=COLUMNS)

    def load_splits(self) -> tuple[list[Problem], list[Problem]]:
        rows = read_rows(self.source, self.split)
        problems = select_problems(rows, self.min_difficulty, self.max_difficulty, self.topics)
        if len(problems) <= self.val_size:
            raise ValueError(
                f"DeepMath: {len(problems)} problems from {self.source!r} pass the filters "
                f"(difficulty {self.min_difficulty}..{self.max_difficulty}, topics {self.topics}); "
                f"need more than val_size={self.val_size}"
            )
        train, val = split_holdout(problems, self.val_size, self.split_seed)
        if self.max_train is not None and self.max_train < len(train):
            train = random.Random(self.split_seed).sample(train, self.max_train)
        log.info("DeepMath: %d training and %d held-out problems from %s", len(train), len(val), self.source)
        return train, val
