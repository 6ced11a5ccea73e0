"""DeepMath-103K problems, filtered to a difficulty band (the paper's "hard" split).

DeepMath-103K (``zwhe99/DeepMath-103K``) has one ``train`` split with ``question``,
``final_answer``, ``difficulty`` (AoPS-style 1–10 in steps of 0.5), ``topic`` (``"Mathematics
-> Calculus -> Integral Calculus"``) and three R1 solutions. There is no official hard split;
``difficulty >= 7`` is the common cut and our default; the Agon paper's recipe
(``configs/deepmath_qwen3_0.6b.yaml``) takes difficulty 8. A few rows carry noise
difficulties (below 1, missing); they are dropped rather than guessed at.

Binary-answer questions are dropped by default, as in the paper: a yes/no or true/false
answer is right half the time by chance, which pays a rival for guessing. The rule is on
``final_answer`` alone (:func:`is_binary_answer`).

Only the four columns we use are read: the R1 solutions are most of the dataset's bytes.
The held-out and training problems are a seeded sample ranked by a hash of each question
(:mod:`agon_lightning.data.sampling`), so the same source, filters and seed give the same
split from any row order, on every rank.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any

from agon_lightning.data import reader
from agon_lightning.data.base import SplitSourceDataModule, TooLong
from agon_lightning.data.sampling import seeded_split
from agon_lightning.game.types import Problem

log = logging.getLogger(__name__)

HUB_ID = "zwhe99/DeepMath-103K"
COLUMNS = ("question", "final_answer", "difficulty", "topic")
LOCAL_SUFFIXES = (".parquet", ".jsonl")
BINARY_ANSWERS = frozenset({"yes", "no", "true", "false"})
# What may wrap a bare word in a LaTeX answer: math mode, \text{}-like commands, \boxed{}.
_WRAPPER = re.compile(
    r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|boxed)\s*\{(.*)\}", re.DOTALL
)


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


def is_binary_answer(final_answer: str) -> bool:
    """Whether an answer is one of yes / no / true / false, in any case and any wrapping.

    Whitespace, math delimiters (``$``, ``\\( \\)``, ``\\[ \\]``), a trailing period and
    wrappers such as ``\\text{}``, ``\\textbf{}``, ``\\mathrm{}`` or ``\\boxed{}`` are peeled off
    first, so ``$\\text{No}$.`` is binary; an answer that merely starts with such a word
    (``No solution``, ``Yes, 3``) or means the same in other words (``Converges``) is not.
    """
    text = final_answer
    while True:
        peeled = text.strip().strip("$").strip().removesuffix(".")
        for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
            if peeled.startswith(left) and peeled.endswith(right):
                peeled = peeled[len(left) : -len(right)]
        wrapped = _WRAPPER.fullmatch(peeled)
        peeled = wrapped[1] if wrapped else peeled
        if peeled == text:
            return text.casefold() in BINARY_ANSWERS
        text = peeled


def select_problems(
    rows: list[dict[str, Any]],
    min_difficulty: float | None = 7.0,
    max_difficulty: float | None = None,
    topics: list[str] | None = None,
    drop_binary: bool = True,
) -> list[Problem]:
    """Problems from rows with a valid difficulty in the band and a topic under one of ``topics``.

    A topic filter matches by prefix, so ``"Mathematics -> Algebra"`` keeps every algebra
    sub-topic. Rows with an empty question or answer are dropped with the invalid ones, and
    with ``drop_binary`` those whose answer :func:`is_binary_answer`.
    """
    problems: list[Problem] = []
    invalid = binary = 0
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
        if drop_binary and is_binary_answer(answer):
            binary += 1
            continue
        metadata = {"index": index, "difficulty": difficulty, "topic": topic}
        problems.append(Problem(question=question, answer=answer, metadata=metadata))
    if invalid:
        log.warning(
            "DeepMath: dropped %d of %d rows with an invalid difficulty or an empty field", invalid, len(rows)
        )
    if binary:
        log.info("DeepMath: dropped %d binary-answer (yes/no, true/false) problems in the band", binary)
    return problems


class DeepMathDataModule(SplitSourceDataModule):
    """DeepMath-103K problems in a difficulty band, with a fixed held-out split.

    Args:
        source: Hub dataset id, or a local Parquet/JSONL file or a folder of them in the
            DeepMath schema.
        split: Hub split to read (DeepMath has only ``train``).
        min_difficulty: Keep rows with ``difficulty >= min_difficulty`` (7.0: the common hard
            cut; ``None``: no lower bound).
        max_difficulty: Keep rows with ``difficulty <= max_difficulty`` (``None``: no bound).
        topics: Keep rows whose topic starts with one of these (``None``: all topics).
        drop_binary: Drop questions whose answer is yes / no / true / false
            (:func:`is_binary_answer`), as the paper does.
        val_size: Held-out problems, sampled from the filtered rows.
        split_seed: Seed of the sample (held-out and training problems alike).
        train_size: Training problems, sampled from the rest (``None``: all of them).
        too_long: Problems whose prompt leaves no room for the completion in the model's context:
            ``drop`` (counted in the log) or ``error`` (see :class:`~agon_lightning.data.base.ProblemDataModule`).
    """

    def __init__(
        self,
        source: str = HUB_ID,
        split: str = "train",
        min_difficulty: float | None = 7.0,
        max_difficulty: float | None = None,
        topics: list[str] | None = None,
        drop_binary: bool = True,
        val_size: int = 300,
        split_seed: int = 1234,
        train_size: int | None = None,
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
        if min_difficulty is not None and max_difficulty is not None and min_difficulty > max_difficulty:
            raise ValueError(
                f"min_difficulty ({min_difficulty}) must be <= max_difficulty ({max_difficulty})"
            )
        if val_size < 0:
            raise ValueError(f"val_size must be >= 0, got {val_size}")
        if train_size is not None and train_size < batch_size:
            raise ValueError(f"train_size ({train_size}) must be at least batch_size ({batch_size})")
        self.source = source
        self.split = split
        self.min_difficulty = min_difficulty
        self.max_difficulty = max_difficulty
        self.topics = topics
        self.drop_binary = drop_binary
        self.val_size = val_size
        self.split_seed = split_seed
        self.train_size = train_size

    def prepare_data(self) -> None:
        # Called on one process per node: download a Hub dataset into the cache once.
        if not Path(self.source).expanduser().exists():
            reader.load_hub(self.source, self.split, columns=COLUMNS)

    def describe(self) -> str:
        return f"{type(self).__name__} {self.source!r}"

    def load_splits(self) -> tuple[list[Problem], list[Problem]]:
        rows = read_rows(self.source, self.split)
        problems = select_problems(
            rows, self.min_difficulty, self.max_difficulty, self.topics, self.drop_binary
        )
        where = (
            f"DeepMath {self.source!r} (difficulty {self.min_difficulty}..{self.max_difficulty}, "
            f"topics {self.topics}, drop_binary={self.drop_binary})"
        )
        train, val = seeded_split(
            problems, question_identity, self.val_size, self.train_size, self.split_seed, where,
            self.option("val_size"),
        )  # fmt: skip
        log.info("DeepMath: %d training and %d held-out problems from %s", len(train), len(val), self.source)
        return train, val


def question_identity(problem: Problem) -> str:
    """What makes two DeepMath rows one problem: the question, whitespace collapsed."""
    return " ".join(problem.question.split())
