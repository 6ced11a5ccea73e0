"""Print a start-vs-end table and save validation curves when ``fit`` ends."""

from __future__ import annotations

import json

import lightning as L

from agon_lightning.report import plot_history, start_end_table

from .run_files import RunDir


class ValidationReport(L.Callback):
    """At the end of ``fit``: a markdown table (stdout and ``report.md``), ``validation.png``, and
    ``outcomes.jsonl`` — the last evaluation problem by problem (question, split, and for each
    policy whether it was right and its tokens), for paired comparisons between runs.

    Args:
        filename: Name of the plot in the run directory.
    """

    def __init__(self, filename: str = "validation.png") -> None:
        self.filename = filename
        self._run_dir = RunDir()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._run_dir.locate(trainer)  # a collective: here, on every rank

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        history = getattr(getattr(pl_module, "evaluator", None), "history", [])
        out = self._run_dir.locate(trainer)
        if not trainer.is_global_zero or not history:
            return
        table = start_end_table(history)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(table + "\n")
        plot = plot_history(history, out / self.filename)
        outcomes = pl_module.evaluator.last_outcomes
        (out / "outcomes.jsonl").write_text("".join(json.dumps(o) + "\n" for o in outcomes))
        print(f"\nHeld-out validation, start vs end (greedy pass@1, mean tokens):\n{table}\nplot: {plot}\n")
