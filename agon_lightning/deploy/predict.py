"""``agon predict``: the deployed policy over a file or a Hub dataset, one JSON line per problem.

Two forms share the command. With ``--bundle`` it loads an adapter bundle through
:class:`~agon_lightning.deploy.cascade.Cascade` (no Trainer) and answers as the bundle deploys — the
cascade, one adapter alone, or the game's answer graph — with every deployment option::

    agon predict --bundle runs/agon/checkpoints/last --input heldout.jsonl --output out.jsonl \\
        [--drafter beta] [--k 5] [--batch-size 100]

With ``--config`` it is LightningCLI's ``predict`` on a training config:
``AgonModule.predict_step`` runs the greedy deployed policy over the data module's
held-out problems and :class:`JsonlPredictionWriter` writes them::

    agon predict --config configs/agon.yaml --model.lora.init_from=BUNDLE \\
        --trainer.callbacks+=agon_lightning.deploy.predict.JsonlPredictionWriter \\
        --trainer.callbacks.output=out.jsonl

Output line i describes input row i: the deployed policy's record (a cascade's draft, summary and
final answer; one adapter's or a game's final answer), or ``{"error": "FILE:LINE: …"}``
for a row that could not be read (the other rows are still solved; the exit status is 1).
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from agon_lightning.data.files import ProblemFields, ProblemRow, read_problem_rows
from agon_lightning.deploy.bundle import bundle_parser
from agon_lightning.deploy.cascade import BACKENDS, Cascade
from agon_lightning.rollout.pipeline import UNVERIFIABLE

log = logging.getLogger(__name__)


@dataclass
class PredictSummary:
    """What a prediction run did.

    Attributes:
        rows: Input rows read.
        errors: Rows that could not be read (written as error records).
        graded: Problems with a gold answer that the verifier could judge.
        correct: Graded problems whose final answer the verifier accepted.
        unverifiable: Problems with a gold answer the verifier could not judge (their verdict's
            reason says why; they are written, not graded).
    """

    rows: int = 0
    errors: int = 0
    graded: int = 0
    correct: int = 0
    unverifiable: int = 0

    @property
    def pass_at_1(self) -> float | None:
        """Accuracy over the graded problems (``None`` when none has a gold answer)."""
        return self.correct / self.graded if self.graded else None

    def __str__(self) -> str:
        score = (
            "no gold answers"
            if self.pass_at_1 is None
            else f"pass@1 {self.correct}/{self.graded} = {self.pass_at_1:.4f}"
        )
        extra = f"; {self.unverifiable} could not be judged" if self.unverifiable else ""
        return f"{self.rows} rows, {self.errors} bad; {score}{extra}"


def _solve_and_write(
    cascade: Cascade,
    rows: list[ProblemRow],
    out: TextIO,
    summary: PredictSummary,
    drafter: str | None,
    k: int,
) -> None:
    """Solve the good rows of ``rows`` as one batch; write every row's record in input order."""
    good = [r for r in rows if r.problem is not None]
    results = iter(
        cascade.solve([r.problem for r in good], drafter, k, batch_size=max(len(good), 1)) if good else []
    )
    for row in rows:
        record: dict[str, Any] = {"index": row.index, "source": row.location}
        if row.error is not None:
            record["error"] = row.error
            summary.errors += 1
            log.warning("skipping %s", row.error)
        else:
            result = next(results)
            record.update(result.to_dict())
            if result.verdict is not None and result.verdict.reason.startswith(UNVERIFIABLE):
                summary.unverifiable += 1
            elif result.verdict is not None:
                summary.graded += 1
                summary.correct += int(result.verdict.correct)
        summary.rows += 1
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    out.flush()  # each batch reaches the file as it is solved: a later crash keeps what was written


def predict_file(
    bundle: str | Path,
    source: str,
    output: str | Path,
    drafter: str | None = None,
    k: int = 1,
    batch_size: int = 8,
    fields: ProblemFields | None = None,
    split: str = "train",
    subset: str | None = None,
    base_model: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    seed: int | None = 0,
    backend: str | None = None,
) -> PredictSummary:
    """Run a bundle's deployed policy over every problem of ``source`` and write JSON lines to ``output``.

    Problems are batched ``batch_size`` at a time in input order (bad rows are skipped, not
    counted), so a held-out file in validation order with ``batch_size = val_batch_size``
    sees exactly validation's batches. Arguments are those of :meth:`Cascade.from_pretrained`,
    :meth:`Cascade.solve` and :func:`~agon_lightning.data.files.read_problem_rows`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rows = read_problem_rows(source, fields, split, subset)
    cascade = Cascade.from_pretrained(
        bundle, device=device, dtype=dtype, base_model=base_model, backend=backend
    )
    if drafter is not None:
        cascade.deployment.drafting(drafter, cascade.adapters)  # a bad drafter fails before any work
    if seed is not None:
        torch.manual_seed(seed)
    summary = PredictSummary()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as out:
        pending: list[ProblemRow] = []
        for row in rows:
            pending.append(row)
            if sum(r.problem is not None for r in pending) == batch_size:
                _solve_and_write(cascade, pending, out, summary, drafter, k)
                pending = []
        if pending:
            _solve_and_write(cascade, pending, out, summary, drafter, k)
    return summary


class JsonlPredictionWriter(BasePredictionWriter):
    """Writes ``AgonModule.predict_step``'s records as JSON lines, batch by batch.

    Args:
        output: The JSONL file; with several processes, rank r writes ``NAME.rank{r}.jsonl``.
    """

    def __init__(self, output: str = "predictions.jsonl") -> None:
        super().__init__(write_interval="batch")
        self.output = output

    def path(self, trainer: L.Trainer) -> Path:
        path = Path(self.output)
        return (
            path.with_name(f"{path.stem}.rank{trainer.global_rank}{path.suffix}")
            if trainer.world_size > 1
            else path
        )

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        path = self.path(trainer)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")

    def write_on_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        prediction: Any,
        batch_indices: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        with self.path(trainer).open("a", encoding="utf-8") as out:
            for i, record in enumerate(prediction):
                index = batch_indices[i] if batch_indices is not None else None
                out.write(json.dumps({"index": index, **record}, ensure_ascii=False) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = bundle_parser(
        "agon predict",
        "Run a bundle's deployed policy (its cascade, one adapter, or its game's answer graph) over a problem "
        "file or Hub dataset; write JSON lines. "
        "(`agon predict --config CONFIG ...` runs LightningCLI's predict instead.)",
    )
    parser.add_argument(
        "--input", required=True, help=".jsonl/.json/.parquet file, a folder of them, or a Hub id"
    )
    parser.add_argument("--output", required=True, help="JSONL to write, one line per input row")
    parser.add_argument(
        "--drafter",
        default=None,
        help="adapter that drafts, or answers alone (default: the bundle's; a graph: none)",
    )
    parser.add_argument(
        "--k", type=int, default=1, help="passes per problem: 1 = greedy, >1 = sampled + majority vote"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="problems per batch")
    parser.add_argument(
        "--question-field",
        default=None,
        help="prompt column, text or chat messages (default: prompt, else question)",
    )
    parser.add_argument(
        "--answer-field", default=None, help="gold answer column (default: answer, else solution; '' = none)"
    )
    parser.add_argument(
        "--metadata-field", default="metadata", help="JSON-object column merged into the metadata"
    )
    parser.add_argument("--split", default="train", help="Hub dataset split")
    parser.add_argument("--subset", default=None, help="Hub dataset configuration name")
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda when available)"
    )
    parser.add_argument("--seed", type=int, default=0, help="torch seed for sampling (k > 1)")
    parser.add_argument(
        "--backend",
        default=None,
        choices=sorted(BACKENDS),
        help="sample with transformers' generate (hf) or one vLLM engine holding every adapter (vllm), "
        "with the bundle's sampling settings (default: the bundle's own rollout)",
    )
    return parser
