"""Problems from a JSONL, JSON, Parquet or Arrow file, a folder or glob of them, a ``datasets``
``save_to_disk`` folder, or a Hub dataset id.

TRL's dataset format reads as it is: a ``prompt`` column, either a string or a list of chat
messages (TRL's *conversational* format, built into the prompt through the chat template), and
any other columns, each passed on under its own name in ``Problem.metadata`` — reward functions
read them there, as TRL passes every column to them. Other layouts name their columns in
:class:`ProblemFields` (``problem``/``solution``, ``question``/``final_answer``).

Rows come from :mod:`agon_lightning.data.reader`; each bad row (malformed JSON, an empty question, a missing
column, messages that are not chat messages) becomes a :class:`ProblemRow` carrying an error
that names the file and the line. Prediction writes an error record for such a row and goes on
with the others; training (:class:`FileProblemDataModule`) refuses the file and lists what is
wrong, because silently training on part of a file is worse than stopping.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from agon_lightning.data.base import SplitSourceDataModule, TooLong, split_holdout
from agon_lightning.data.reader import RawRow, iter_rows
from agon_lightning.game.types import Problem
from agon_lightning.infra.errors import UsageError

MAX_LISTED_ERRORS = 10
# The automatic choices, in order: TRL's prompt column first.
QUESTION_COLUMNS = ("prompt", "question")
ANSWER_COLUMNS = ("answer", "solution")


@dataclass
class ProblemFields:
    """Which columns of a row make a :class:`Problem`.

    Attributes:
        question: Column holding the prompt: a string, or a list of chat messages
            (``{"role", "content"}``; the question is then the last user message's content).
            ``None`` (default): ``prompt`` when the row has it (TRL's name), else ``question``.
        answer: Column holding the gold answer, which the built-in verifiers compare with.
            ``None`` (default): ``answer`` when the row has it, else ``solution`` (the column
            TRL's ``accuracy_reward`` reads), else no gold answer. ``""``: no gold answer. A
            null becomes ``None``, anything else its string.
        metadata: Column holding a JSON object whose keys are added to ``Problem.metadata``
            (what a verifier needs: tests, a reasoning-gym entry); a column of the row with the
            same name wins. ``None``: no such column.

    Every column of the row but the prompt's is in ``Problem.metadata`` under its own name,
    verbatim, the answer's and the metadata object's included.
    """

    question: str | None = None
    answer: str | None = None
    metadata: str | None = "metadata"

    def __post_init__(self) -> None:
        if self.question == "":
            raise ValueError(
                f"fields.question must name a column, or be null to choose one of {QUESTION_COLUMNS}; "
                "got an empty string"
            )

    def question_column(self, row: Mapping[str, Any]) -> str:
        """The column the question is read from in ``row``.

        Raises:
            ValueError: the column is not in the row (the message lists the row's columns).
        """
        if self.question is not None:
            if self.question not in row:
                raise ValueError(
                    f"no {self.question!r} field (the row has {sorted(row)}); set the question field"
                )
            return self.question
        found = next((name for name in QUESTION_COLUMNS if name in row), None)
        if found is None:
            raise ValueError(
                f"no 'prompt' or 'question' column (the row has {sorted(row)}); set the question field "
                "(fields.question) to the column holding the prompt"
            )
        return found

    def answer_column(self, row: Mapping[str, Any]) -> str | None:
        """The column the gold answer is read from in ``row`` (``None``: no gold answer)."""
        if self.answer is not None:
            return self.answer or None
        return next((name for name in ANSWER_COLUMNS if name in row), None)

    def describe(self, row: Mapping[str, Any]) -> str:
        """Which column became what, for a log line: ``question from 'prompt' (chat messages), ...``."""
        question = self.question_column(row)
        kind = "chat messages" if isinstance(row[question], list) else "text"
        answer = self.answer_column(row)
        gold = f"gold answer from {answer!r}" if answer else "no gold answer"
        rest = sorted(k for k in row if k != question)
        return f"question from {question!r} ({kind}), {gold}; every other column in the metadata: {rest}"


@dataclass
class ProblemRow:
    """One input row: its problem, or why it could not be read.

    Attributes:
        index: 0-based position among the rows of the source (blank lines do not count).
        location: ``FILE:LINE`` for JSON lines, ``FILE row N`` for Parquet, Arrow and Hub rows.
        problem: The problem; ``None`` when the row is bad.
        error: What is wrong with the row, prefixed with its location; ``None`` when fine.
    """

    index: int
    location: str
    problem: Problem | None = None
    error: str | None = None


def row_to_problem(row: Any, fields: ProblemFields | None = None) -> Problem:
    """A :class:`Problem` from a row dict (see :class:`ProblemFields` for which column is what).

    Raises:
        ValueError: the row is not an object, lacks the question, has an empty one, or a list
            there that is not chat messages with a user message.
    """
    fields = fields or ProblemFields()
    if not isinstance(row, Mapping):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    column = fields.question_column(row)
    prompt, messages = row[column], None
    if isinstance(prompt, list):
        try:
            problem = Problem.from_messages(prompt)
        except ValueError as err:
            raise ValueError(f"field {column!r}: {err}") from err
        prompt, messages = problem.question, problem.messages
    elif not isinstance(prompt, str):
        raise ValueError(
            f"field {column!r} must be a string or a list of chat messages, got {type(prompt).__name__}"
        )
    if not prompt.strip():
        where = "the last user message of field" if messages is not None else "field"
        raise ValueError(f"empty question in {where} {column!r}")
    answer_column = fields.answer_column(row)
    answer = row.get(answer_column) if answer_column else None
    metadata = {key: value for key, value in row.items() if key != column}
    merged = row.get(fields.metadata) if fields.metadata else None
    if merged is not None:
        if not isinstance(merged, Mapping):
            raise ValueError(f"field {fields.metadata!r} must be an object, got {type(merged).__name__}")
        for key, value in merged.items():
            metadata.setdefault(key, value)
    return Problem(prompt, None if answer is None else str(answer), metadata, messages)


def problem_rows(rows: Iterable[RawRow], fields: ProblemFields | None = None) -> list[ProblemRow]:
    """Each raw row (``(location, row, error)``, as :mod:`~agon_lightning.data.reader` gives them)
    with its problem or its error. Which column became what is said once, in the run's log, for the
    first good row (where the automatic choices were made)."""
    fields = fields or ProblemFields()
    out: list[ProblemRow] = []
    described = False
    for index, (location, raw, error) in enumerate(rows):
        if error is None:
            try:
                out.append(ProblemRow(index, location, problem=row_to_problem(raw, fields)))
                if not described:
                    rank_zero_info(f"{location}: {fields.describe(raw)}")
                    described = True
                continue
            except ValueError as err:
                error = str(err)
        out.append(ProblemRow(index, location, error=f"{location}: {error}"))
    return out


def read_problem_rows(
    source: str, fields: ProblemFields | None = None, split: str = "train", subset: str | None = None
) -> list[ProblemRow]:
    """Every row of ``source`` in order, each with its problem or its error.

    Args:
        source: A ``.jsonl``/``.ndjson``/``.json``/``.parquet``/``.arrow`` file, a folder of
            them (read in name order), a glob, a ``datasets`` ``save_to_disk`` folder, or a Hub
            dataset id.
        fields: Column names (default: :class:`ProblemFields`' automatic choices).
        split: Split of a Hub dataset or a saved ``DatasetDict``.
        subset: Configuration name of a Hub dataset (e.g. ``"main"`` for GSM8K).

    Raises:
        FileNotFoundError: ``source`` is no file, folder or loadable Hub dataset.
    """
    return problem_rows(iter_rows(source, split, subset), fields)


def problems_of(rows: list[ProblemRow], what: str) -> list[Problem]:
    """The problems of ``rows``; no row, or any bad row, is an error.

    Raises:
        UsageError: there is no row, or some rows are bad (the first few are listed with their
            file and line).
    """
    if not rows:
        raise UsageError(f"{what} holds no rows (an empty file?); give a source with at least one problem")
    errors = [r.error for r in rows if r.error is not None]
    if errors:
        listed = "\n  ".join(errors[:MAX_LISTED_ERRORS])
        more = f"\n  … and {len(errors) - MAX_LISTED_ERRORS} more" if len(errors) > MAX_LISTED_ERRORS else ""
        raise UsageError(f"{len(errors)} of {len(rows)} rows of {what} are bad:\n  {listed}{more}")
    return [r.problem for r in rows if r.problem is not None]


def load_problems(
    source: str,
    fields: ProblemFields | None = None,
    split: str = "train",
    subset: str | None = None,
    what: str | None = None,
) -> list[Problem]:
    """All problems of ``source`` (see :func:`read_problem_rows`); no row, or any bad row, is an error.

    Args:
        what: How messages name the source (default: ``repr(source)``).

    Raises:
        UsageError: there is no row, or some rows are bad (the first few are listed with their
            file and line).
    """
    return problems_of(read_problem_rows(source, fields, split, subset), what or repr(source))


def problem_to_row(problem: Problem) -> dict[str, Any]:
    """A row that :func:`row_to_problem` reads back, with the default fields, as the same question,
    messages and answer, and metadata holding the same keys (plus ``answer`` when written).

    The prompt goes under ``prompt`` (the messages, or the question) and each metadata key is
    a column; ``answer`` is written when there is one, or when a null one is needed to keep a
    metadata column (``solution``) from being read as the answer.
    """
    row: dict[str, Any] = {"prompt": problem.question if problem.messages is None else problem.messages}
    row.update((k, v) for k, v in problem.metadata.items() if k != "prompt")
    if problem.answer is not None or any(name in row for name in ANSWER_COLUMNS):
        row["answer"] = problem.answer
    return row


def write_problems(problems: list[Problem], path: str | Path) -> Path:
    """Write problems as JSON lines (:func:`problem_to_row`) that :func:`load_problems` reads back.

    Handy for freezing a data module's held-out set (``dm.val_problems``) for ``agon predict``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps(problem_to_row(p)) + "\n")
    return path


class FileProblemDataModule(SplitSourceDataModule):
    """Problems from files, a saved dataset or a Hub dataset; TRL's format as it is, other layouts
    through ``fields``. Selectable as ``--data=files`` (or ``--data=FileProblemDataModule``).

    Args:
        train_source: Training problems: a ``.jsonl``/``.json``/``.parquet``/``.arrow`` file, a
            folder or glob of them, a ``datasets`` ``save_to_disk`` folder, or a Hub dataset id.
        val_source: Held-out problems from another source; ``None`` splits ``val_size``
            problems off the training source instead.
        val_size: Held-out problems split off ``train_source`` when ``val_source`` is ``None``.
        split: Split of ``train_source`` (a Hub dataset or a saved ``DatasetDict``).
        val_split: Split of ``val_source`` (``None``: the same as ``split``).
        subset: Hub configuration name, for both sources.
        fields: Which column is the prompt, the gold answer and a metadata object (default:
            ``prompt`` else ``question``; ``answer`` else ``solution``; ``metadata``).
        split_seed: Seed of the held-out split.
        batch_size: Problems per training step (P).
        val_batch_size: Problems per validation (and prediction) batch.
        seed: Seed for shuffling the training problems.
        num_workers: DataLoader workers.
        too_long: Problems whose prompt leaves no room for the completion in the model's context:
            ``drop`` (counted in the log) or ``error`` (see :class:`ProblemDataModule`).
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
        too_long: TooLong = "drop",
    ) -> None:
        super().__init__(
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers,
            too_long=too_long,
        )  # fmt: skip
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

    def describe(self) -> str:
        return f"{type(self).__name__} {self.train_source!r}"

    def load_splits(self) -> tuple[list[Problem], list[Problem]]:
        train = f"data.train_source {self.train_source!r}"
        problems = load_problems(self.train_source, self.fields, self.split, self.subset, train)
        if self.val_source is None:
            problems, val = split_holdout(
                problems, self.val_size, self.split_seed, train, self.option("val_size")
            )
        else:
            val_source = f"data.val_source {self.val_source!r}"
            val = load_problems(
                self.val_source, self.fields, self.val_split or self.split, self.subset, val_source
            )
        rank_zero_info(f"FileProblemDataModule: {len(problems)} training and {len(val)} held-out problems")
        return problems, val
