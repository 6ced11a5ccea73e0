"""A few games, read in full: what was drafted, summarized, answered, judged and paid.

Metrics say *that* something changed; reading a handful of games says *what*. Every
``every_n_steps`` steps this takes the first draft of each of the first ``num_rows`` problems
of the step (``module.last_record``, no extra generation) and writes one row per draft:
problem, gold answer, draft, summary, challenger answer, both verdicts and both rewards.

Rows are appended to ``samples.jsonl`` in the run directory and sent to each logger in its own
idiom: ``log_table`` where a logger has it (Weights & Biases), a Markdown table as text for
TensorBoard, a JSON table artifact per step for MLflow. The CSV logger's table is the JSONL file
beside its ``metrics.csv``; any other logger is told once, in the log, that the table is there.
With reward functions, each function's value for the draft and the answer is a column too.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import lightning as L
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from .protocol import AgonModuleView
from .run_files import RunDir, append_jsonl

log = logging.getLogger(__name__)

FILENAME = "samples.jsonl"
COLUMNS = ("step", "problem", "gold", "drafter", "draft", "draft_verdict", "draft_reward", "draft_functions",
           "summary", "challenger", "challenge", "challenge_verdict", "challenge_reward", "challenge_functions")  # fmt: skip


def _functions(verdict: Any) -> str | None:
    """Each reward function's value for one completion, as JSON (``None`` without reward functions)."""
    values = getattr(verdict, "rewards", None)
    return json.dumps(values) if values else None


def _clip(text: str, max_chars: int | None) -> str:
    return text if max_chars is None or len(text) <= max_chars else text[:max_chars] + " …"


def _verdict(verdict: Any) -> str:
    return (
        f"{'correct' if verdict.correct else 'wrong'} ({verdict.reason or '-'}; answer={verdict.extracted!r})"
    )


def sample_rows(record: Any, num_rows: int, max_chars: int | None = None) -> list[dict[str, Any]]:
    """One row per problem (its first draft) for the first ``num_rows`` problems of a step."""
    draft, challenge = record.draft, record.challenge
    group = len(draft.verdicts) // len(record.problems)  # N drafts per problem
    rows = []
    for p, problem in enumerate(record.problems[:num_rows]):
        i = p * group
        row = {
            "step": record.step,
            "problem": _clip(problem.question, max_chars),
            "gold": problem.answer,
            "drafter": draft.adapter,
            "draft": _clip(draft.rollouts.texts[i], max_chars),
            "draft_verdict": _verdict(draft.verdicts[i]),
            "draft_reward": float(draft.rewards[i]),
            "draft_functions": _functions(draft.verdicts[i]),
            "summary": None, "challenger": None, "challenge": None, "challenge_verdict": None, "challenge_reward": None,
            "challenge_functions": None,
        }  # fmt: skip
        if challenge is not None:
            j = p * (
                len(challenge.verdicts) // len(record.problems)
            )  # its first row of the problem: groups may differ
            row.update(
                # a game of one's own may keep no summaries (its second stage read something else)
                summary=_clip(record.summaries[j], max_chars) if j < len(record.summaries) else None,
                challenger=challenge.adapter,
                challenge=_clip(challenge.rollouts.texts[j], max_chars),
                challenge_verdict=_verdict(challenge.verdicts[j]),
                challenge_reward=float(challenge.rewards[j]),
                challenge_functions=_functions(challenge.verdicts[j]),
            )
        rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (pipes escaped, line breaks shown as ``⏎``)."""

    def cell(value: Any) -> str:
        return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ⏎ ")

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(row[c]) for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


class SampleTable(L.Callback):
    """Every ``every_n_steps`` steps, a few games as a table: JSONL in the run directory and the loggers.

    Args:
        every_n_steps: Write after steps 0, k, 2k, ...
        num_rows: Problems per table (the first draft of each).
        max_chars: Cut longer texts to this many characters (``None``: keep whole).
        filename: JSON-lines file in the run directory.
    """

    def __init__(
        self,
        every_n_steps: int = 10,
        num_rows: int = 4,
        max_chars: int | None = 2000,
        filename: str = FILENAME,
    ) -> None:
        if every_n_steps < 1 or num_rows < 1:
            raise ValueError(f"every_n_steps and num_rows must be >= 1, got {every_n_steps} and {num_rows}")
        self.every_n_steps = every_n_steps
        self.num_rows = num_rows
        self.max_chars = max_chars
        self.filename = filename
        self._run_dir = RunDir()
        self._told: set[str] = set()  # loggers already named as showing no tables

    def setup(self, trainer: L.Trainer, pl_module: AgonModuleView, stage: str) -> None:
        self._run_dir.locate(trainer)  # a collective: here, on every rank

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: AgonModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        record = pl_module.last_record
        if record is None or record.step % self.every_n_steps:
            return
        rows = sample_rows(record, self.num_rows, self.max_chars)
        append_jsonl(trainer, self._run_dir.locate(trainer), self.filename, rows)  # rank zero writes
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            send_table(logger, rows, record.step, self._told)


def send_table(logger: Any, rows: list[dict[str, Any]], step: int, told: set[str]) -> None:
    """The rows to one logger, in its idiom; a logger with none is named once (``told``) in the log."""
    name = type(logger).__name__
    if hasattr(logger, "log_table"):  # Weights & Biases
        logger.log_table(
            key="samples", columns=list(COLUMNS), data=[[r[c] for c in COLUMNS] for r in rows], step=step
        )
    elif isinstance(logger, TensorBoardLogger):
        logger.experiment.add_text("samples", markdown_table(rows), global_step=step)
    elif name == "MLFlowLogger":  # by name: mlflow is an optional package
        table = {c: [r[c] for r in rows] for c in COLUMNS}
        logger.experiment.log_table(logger.run_id, data=table, artifact_file=f"samples/step_{step:06d}.json")
    elif not isinstance(logger, CSVLogger) and name not in told:
        told.add(name)
        log.info(
            "SampleTable: %s shows no tables; the sample games are in %s in the run directory", name, FILENAME
        )
