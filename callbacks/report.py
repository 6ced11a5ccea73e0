"""Print a start-vs-end table and save validation curves when ``fit`` ends."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L

from agon_lightning.experiments.plots import plot_validation
from agon_lightning.experiments.report import start_end_table

from .protocol import AgonModuleView
from .run_files import RunDir


class ValidationReport(L.Callback):
    """At the end of ``fit``: a markdown table (stdout and ``report.md``), ``validation.png`` (a column
    per split, each policy in its own colour, cascades dashed, the deployed one thick), and
    ``outcomes.jsonl`` — the last evaluation problem by problem (question, split, and for each
    policy whether it was right, its tokens and cost; for each cascade what it converted or
    broke), for paired comparisons between runs. ``agon validate`` writes ``outcomes.jsonl`` too.

    Args:
        filename: Name of the plot in the run directory.
    """

    def __init__(self, filename: str = "validation.png") -> None:
        self.filename = filename
        self._run_dir = RunDir()

    def setup(self, trainer: L.Trainer, pl_module: AgonModuleView, stage: str) -> None:
        self._run_dir.locate(trainer)  # a collective: here, on every rank

    def on_fit_end(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        history = getattr(getattr(pl_module, "evaluator", None), "history", [])
        out = self._run_dir.locate(trainer)
        if not trainer.is_global_zero or not history:
            return
        table = start_end_table(history)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(table + "\n")
        plot = plot_validation(history, out / self.filename, pl_module.evaluator.deployed_key)
        write_outcomes(out, pl_module.evaluator.last_outcomes)
        print(f"\nHeld-out validation, start vs end (greedy pass@1, mean tokens):\n{table}\nplot: {plot}")

    def on_validation_end(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        if trainer.state.fn != "validate":
            return
        out = self._run_dir.locate(trainer)  # located in setup, on every rank
        outcomes = getattr(getattr(pl_module, "evaluator", None), "last_outcomes", [])
        if trainer.is_global_zero and outcomes:
            out.mkdir(parents=True, exist_ok=True)
            write_outcomes(out, outcomes)


def write_outcomes(out: Path, outcomes: list[dict]) -> None:
    """``outcomes.jsonl`` in ``out``: one JSON object per held-out problem."""
    (out / "outcomes.jsonl").write_text("".join(json.dumps(o) + "\n" for o in outcomes))
