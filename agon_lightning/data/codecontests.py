"""DeepMind's CodeContests: competitive-programming problems judged by running the tests.

Rows follow the dataset's own schema (``name``, ``description``, ``public_tests`` /
``private_tests`` / ``generated_tests`` as ``{input: [...], output: [...]}``, ``difficulty``,
``cf_rating``, ``time_limit {seconds, nanos}``, ``memory_limit_bytes``, ...) and come from the
Hub id ``deepmind/code_contests`` or from local JSONL / Parquet files in that layout (read by
:mod:`agon_lightning.data.reader`: a missing local file is an error, never a download). Each
row becomes a :class:`Problem` whose statement is the question and whose tests and limits
go to ``metadata``, where :class:`~agon_lightning.verifiers.code.CodeVerifier` reads them.

Problems that read or write named files (``input_file`` / ``output_file``) are dropped: the
judge feeds stdin and reads stdout. ``difficulty`` is the raw proto enum (A=7 ... K=17, then
L=19: 18 is unused), so filters accept either the integer or the letter; ``cf_rating`` is the
Codeforces rating (800 = easiest; 0 = unrated), which ``configs/codecontests_qwen3.yaml`` uses to
define the paper's "easy subset".

Without ``val_path`` the held-out problems are carved out of the training source, ranked by a
hash of each problem's name (:mod:`agon_lightning.data.sampling`): the same filters and seed
give the same split from any row order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agon_lightning.data.base import SplitSourceDataModule, TooLong
from agon_lightning.data.reader import read_rows
from agon_lightning.data.sampling import seeded_split
from agon_lightning.game.types import Problem

HUB_ID = "deepmind/code_contests"
TEST_SETS = ("public_tests", "private_tests", "generated_tests")
# CodeContests' Difficulty enum: A..K = 7..17, L..V = 19..29 (18 is skipped in the proto).
DIFFICULTY_LETTERS = {chr(ord("A") + i): 7 + i for i in range(11)} | {
    chr(ord("L") + i): 19 + i for i in range(11)
}
SOURCES = {"codechef": 1, "codeforces": 2, "hackerearth": 3, "codejam": 4, "atcoder": 6, "aizu": 7}
INSTRUCTION = (
    "Solve it with a Python 3 program that reads the input from standard input and writes the "
    "answer to standard output. Explain your approach briefly, then give the complete program "
    "in a single ```python code block at the end."
)
DRAFT_PROMPT = "{question}\n\n" + INSTRUCTION
CHALLENGE_PROMPT = (
    "{question}\n\nAnother solver's summary of its approach:\n{summary}\n\nIt may be wrong. " + INSTRUCTION
)


def enum_code(value: int | str, names: dict[str, int], field: str) -> int:
    """The enum integer of ``value``, given as an integer or as one of ``names`` (any case)."""
    if isinstance(value, int):
        return value
    code = {name.lower(): number for name, number in names.items()}.get(value.lower())
    if code is None:
        raise ValueError(f"unknown {field} {value!r}; use an integer or one of {list(names)}")
    return code


def difficulty_code(value: int | str) -> int:
    """The enum integer of a difficulty given as an integer or a letter (``"A"`` → 7)."""
    return enum_code(value, DIFFICULTY_LETTERS, "difficulty")


def source_code(value: int | str) -> int:
    """The enum integer of a source given as an integer or a name (``"codeforces"`` → 2)."""
    return enum_code(value, SOURCES, "source")


def time_limit_seconds(value: Any) -> float | None:
    """``{seconds, nanos}`` (or a number) as float seconds; ``None`` when absent or zero."""
    if value is None:
        return None
    if isinstance(value, dict):
        seconds = (value.get("seconds") or 0) + (value.get("nanos") or 0) / 1e9
    else:
        seconds = float(value)
    return seconds if seconds > 0 else None


def row_tests(
    row: dict[str, Any], test_sets: Iterable[str], max_tests: int | None = None
) -> list[dict[str, str]]:
    """The row's tests from ``test_sets``, in order, as ``{"input", "output"}`` dicts."""
    tests = []
    for name in test_sets:
        block = row.get(name) or {}
        tests += [
            {"input": i, "output": o} for i, o in zip(block.get("input") or [], block.get("output") or [])
        ]
    return tests[:max_tests]


def row_to_problem(
    row: dict[str, Any], test_sets: Iterable[str] = TEST_SETS, max_tests: int | None = None
) -> Problem:
    """One CodeContests row as a :class:`Problem` (tests and limits in ``metadata``)."""
    return Problem(
        question=row["description"].strip(),
        metadata={
            "name": row.get("name"),
            "tests": row_tests(row, test_sets, max_tests),
            "time_limit": time_limit_seconds(row.get("time_limit")),
            "memory_limit_bytes": row.get("memory_limit_bytes") or None,
            "difficulty": row.get("difficulty"),
            "cf_rating": row.get("cf_rating"),
            "source": row.get("source"),
        },
    )


class CodeContestsDataModule(SplitSourceDataModule):
    """CodeContests problems, filtered by difficulty, rating and source.

    Args:
        train_path: Hub id, or a local ``.jsonl`` / ``.parquet`` file, directory or glob.
        train_split: Split to load when ``train_path`` is a Hub id.
        val_path: Same forms as ``train_path``; ``None`` holds out ``val_size`` training problems.
        val_split: Split to load when ``val_path`` is a Hub id.
        val_size: Problems held out of training when ``val_path`` is ``None``.
        split_seed: Seed of the sample of held-out and training problems.
        difficulties: Keep only these difficulties (enum integers or letters, e.g. ``["A", "B"]``).
        min_rating: Keep only problems with ``cf_rating >= min_rating`` (drops unrated ones).
        max_rating: Keep only problems with ``cf_rating <= max_rating`` (drops unrated ones).
        sources: Keep only these sources (enum integers or names, e.g. ``["codeforces"]``).
        test_sets: Which test lists the verifier runs, in order.
        max_tests: Keep at most this many tests per problem (generated tests can run to hundreds).
        train_size: Keep a seeded sample of at most this many training problems (after
            filtering; ``None``: all).
        too_long: Problems whose prompt leaves no room for the completion in the model's context:
            ``drop`` (counted in the log) or ``error`` (see :class:`~agon_lightning.data.base.ProblemDataModule`).
    """

    def __init__(
        self,
        train_path: str = HUB_ID,
        train_split: str = "train",
        val_path: str | None = HUB_ID,
        val_split: str = "valid",
        val_size: int = 50,
        split_seed: int = 1234,
        difficulties: list[int | str] | None = None,
        min_rating: int | None = None,
        max_rating: int | None = None,
        sources: list[int | str] | None = None,
        test_sets: list[str] | None = None,
        max_tests: int | None = 20,
        train_size: int | None = None,
        batch_size: int = 4,
        val_batch_size: int = 16,
        seed: int = 0,
        num_workers: int = 0,
        too_long: TooLong = "drop",
    ) -> None:
        super().__init__(
            batch_size=batch_size, val_batch_size=val_batch_size, seed=seed, num_workers=num_workers,
            too_long=too_long,
        )  # fmt: skip
        self.test_sets = list(TEST_SETS) if test_sets is None else test_sets
        unknown = sorted(set(self.test_sets) - set(TEST_SETS))
        if unknown or not self.test_sets:
            raise ValueError(f"test_sets must be a non-empty subset of {TEST_SETS}, got {self.test_sets}")
        if max_tests is not None and max_tests < 1:
            raise ValueError(f"max_tests must be >= 1 or None, got {max_tests}")
        self.train_path, self.train_split = train_path, train_split
        self.val_path, self.val_split, self.val_size = val_path, val_split, val_size
        self.split_seed = split_seed
        self.difficulties = None if difficulties is None else {difficulty_code(d) for d in difficulties}
        self.sources = None if sources is None else {source_code(s) for s in sources}
        self.min_rating, self.max_rating = min_rating, max_rating
        self.max_tests = max_tests
        self.train_size = train_size

    def keep(self, row: dict[str, Any]) -> bool:
        """Whether a row passes the filters (and can be judged on stdin/stdout with tests)."""
        if row.get("input_file") or row.get("output_file"):
            return False
        if self.difficulties is not None and row.get("difficulty") not in self.difficulties:
            return False
        if self.sources is not None and row.get("source") not in self.sources:
            return False
        rating = row.get("cf_rating") or None  # the dataset stores 0 for "unrated"
        if self.min_rating is not None and (rating is None or rating < self.min_rating):
            return False
        if self.max_rating is not None and (rating is None or rating > self.max_rating):
            return False
        return bool(row_tests(row, self.test_sets, 1))

    def load(self, path: str, split: str) -> list[Problem]:
        """The problems at ``path`` that pass the filters."""
        return [
            row_to_problem(row, self.test_sets, self.max_tests)
            for row in read_rows(path, split)
            if self.keep(row)
        ]

    def describe(self) -> str:
        return f"{type(self).__name__} {self.train_path!r}"

    def load_splits(self) -> tuple[list[Problem], list[Problem]]:
        # Read the training source once; carve the held-out set from it when there is no val_path.
        problems = self.load(self.train_path, self.train_split)
        where = f"CodeContests {self.train_path!r}"
        if self.val_path:
            train, _ = seeded_split(problems, name_identity, 0, self.train_size, self.split_seed, where)
            return train, self.load(self.val_path, self.val_split)
        return seeded_split(
            problems,
            name_identity,
            self.val_size,
            self.train_size,
            self.split_seed,
            where,
            self.option("val_size"),
        )


def name_identity(problem: Problem) -> str:
    """What makes two CodeContests rows one problem: its name (``"1374_B. Multiply by 2..."``)."""
    return problem.metadata.get("name") or problem.question
