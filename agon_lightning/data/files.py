"""Problems from a JSONL, JSON or Parquet file, a folder or glob of them, or a Hub dataset id.

Any dataset with a question column and (optionally) a gold-answer column becomes a list of
:class:`Problem`; which column is which is configurable, since every dataset names them
differently (``question``/``answer``, ``problem``/``solution``, ``prompt``/``final_answer``).

Rows come from :mod:`agon_lightning.data.reader`; each bad row (malformed JSON, an empty question, a missing
column) becomes a :class:`ProblemRow` carrying an error that names the file and the line.
Prediction writes an error record for such a row and goes on with the others; training
(:class:`FileProblemDataModule`) refuses the file and lists what is wrong, because silently
training on part of a file is worse than stopping.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agon_lightning.data.base import SplitSourceDataModule, split_holdout
from agon_lightning.data.reader import iter_rows
from agon_lightning.types import Problem

MAX_LISTED_ERRORS = 10


@dataclass
class ProblemFields:
    """Which columns of a row make a :class:`Problem`.

    Attributes:
        question: Column holding the problem statement (required, non-empty).
        answer: Column holding the gold answer (``None``: the data has no gold answers). A
            row without it, or with a null, has no gold answer; numbers become strings.
        metadata: Column holding a JSON object merged into ``Problem.metadata`` (what a
            verifier needs: tests, a reasoning-gym entry). Every other column is copied into
            the metadata as well, under its own name.
    """

    question: str = "question"
    answer: str | None = "answer"
    metadata: str | None = "metadata"

    def __post_init__(self) -> None:
        if not self.question:
            raise ValueError("fields.question must name a column, got an empty string")


@dataclass
class ProblemRow:
    """One input row: its problem, or why it could not be read.

    Attributes:
        index: 0-based position among the rows of the source (blank lines do not count).
        location: ``FILE:LINE`` for JSON lines, ``FILE row N`` for Parquet and Hub rows.
        problem: The problem; ``None`` when the row is bad.
        error: What is wrong with the row, prefixed with its location; ``None`` when fine.
    """

    index: int
    location: str
    problem: Problem | None = None
    error: str | None = None


def row_to_problem(row: Any, fields: ProblemFields) -> Problem:
    """A :class:`Problem` from a row dict.

    Raises:
        ValueError: the row is not an object, lacks the question, or has an empty one.
    """
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    if fields.question not in row:
        raise ValueError(f"no {fields.question!r} field (the row has {sorted(row)}); set the question field")
    question = row[fields.question]
    if not isinstance(question, str):
        raise ValueError(f"field {fields.question!r} must be a string, got {type(question).__name__}")
    if not question.strip():
        raise ValueError(f"empty question in field {fields.question!r}")
    answer = row.get(fields.answer) if fields.answer else None
    metadata: dict[str, Any] = {}
    if fields.metadata and row.get(fields.metadata) is not None:
        if not isinstance(row[fields.metadata], dict):
            raise ValueError(
                f"field {fields.metadata!r} must be an object, got {type(row[fields.metadata]).__name__}"
            )
        metadata.update(row[fields.metadata])
    used = {fields.question, fields.answer, fields.metadata}
    for key, value in row.items():
        if key not in used:
            metadata.setdefault(key, value)
    return Problem(question=question, answer=None if answer is None else str(answer), metadata=metadata)


def read_problem_rows(
    source: str, fields: ProblemFields | None = None, split: str = "train", subset: str | None = None
) -> list[ProblemRow]:
    """Every row of ``source`` in order, each with its problem or its error.

    Args:
        source: A ``.jsonl``/``.ndjson``/``.json``/``.parquet`` file, a folder of them (read in
            name order), a glob, or a Hub dataset id.
        fields: Column names (defaults: ``question``, ``answer``, ``metadata``).
        split: Split of a Hub dataset.
        subset: Configuration name of a Hub dataset (e.g. ``"main"`` for GSM8K).

    Raises:
        FileNotFoundError: ``source`` is no file, folder or loadable Hub dataset.
    """
    fields = fields or ProblemFields()
    rows = []
    for index, (location, raw, error) in enumerate(iter_rows(source, split, subset)):
        if error is None:
            try:
                rows.append(ProblemRow(index, location, problem=row_to_problem(raw, fields)))
                continue
            except ValueError as err:
                error = str(err)
        rows.append(ProblemRow(index, location, error=f"{location}: {error}"))
    return rows


def load_problems(
    source: str, fields: ProblemFields | None = None, split: str = "train", subset: str | None = None
) -> list[Problem]:
    """All problems of ``source``; any bad row is an error.

    Raises:
        ValueError: some rows are bad (the first few are listed with their file and line).
    """
    rows = read_problem_rows(source, fields, split, subset)
    errors = [r.error for r in rows if r.error is not None]
    if errors:
        listed = "\n  ".join(errors[:MAX_LISTED_ERRORS])
        more = f"\n  … and {len(errors) - MAX_LISTED_ERRORS} more" if len(errors) > MAX_LISTED_ERRORS else ""
        raise ValueError(f"{len(errors)} of {len(rows)} rows of {source!r} are bad:\n  {listed}{more}")
    return [r.problem for r in rows if r.problem is not None]


def write_problems(problems: list[Problem], path: str | Path) -> Path:
    """Write problems as JSON lines that :func:`load_problems` reads back with the default fields.

    Handy for freezing a data module's held-out set (``dm.val_problems``) for ``agon predict``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps({"question": p.question, "answer": p.answer, "metadata": p.metadata}) + "\n")
    return path


class FileProblemDataModule(SplitSourceDataModule):
    """Problems from files or a Hub dataset, with configurable column names.

    Args:
        train_source: Training problems: a file, a folder of files, or a Hub dataset id.
        val_source: Held-out problems from another source; ``None`` splits ``val_size``
            problems off the training source instead.
        val_size: Held-out problems split off ``train_source`` when ``val_source`` is ``None``.
        split: Hub split of ``train_source``.
        val_split: Hub split of ``val_source`` (``None``: the same as ``split``).
        subset: Hub configuration name, for both sources.
        fields: Column names.
        split_seed: Seed of the held-out split.
        batch_size: Problems per training step (P).
        val_batch_size: Problems per validation (and prediction) batch.
        seed: Seed for shuffling the training problems.
        num_workers: DataLoader workers.
    """

    def __init__(
        self,
        train_source: str,
        val_source: str | None = None,
        val_size: int = 0,
        split: str = "train",
        val_split: str | None = None,
        subset: str | None = None,
        fields: ProblemFields = ProblemFields(),
        split_seed: int = 0,
        batch_size: int = 4,
        val_batch_size: int = 50,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__(
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers
        )
        if val_size < 0:
            raise ValueError(f"val_size must be >= 0, got {val_size}")
        if val_source is not None and val_size:
            raise ValueError(f"give val_source ({val_source!r}) or val_size ({val_size}), not both")
        self.train_source = train_source
        self.val_source = val_source
        self.val_size = val_size
        self.split = split
        self.val_split = val_split
        self.subset = subset
        self.fields = fields
        self.split_seed = split_seed

    def load_splits(self) -> tuple[list[Problem], list[Problem]]:
        problems = load_problems(self.train_source, self.fields, self.split, self.subset)
        if self.val_source is None:
            return split_holdout(problems, self.val_size, self.split_seed)
        return problems, load_problems(
            self.val_source, self.fields, self.val_split or self.split, self.subset
        )
