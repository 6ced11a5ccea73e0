"""Print a start-vs-end table and save validation curves when ``fit`` ends."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from agon_lightning.report import plot_history, start_end_table


def run_directory(trainer: L.Trainer) -> Path:
    """The logger's version directory (where ``metrics.csv`` lives), else ``default_root_dir``."""
    return Path(trainer.log_dir or trainer.default_root_dir)


class ValidationReport(L.Callback):
    """At the end of ``fit``: a markdown table (stdout and ``report.md``) and ``validation.png``.

    Args:
        filename: Name of the plot in the run directory.
    """

    def __init__(self, filename: str = "validation.png") -> None:
        self.filename = filename

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        history = getattr(getattr(pl_module, "evaluator", None), "history", [])
        if not trainer.is_global_zero or not history:
            return
        out = run_directory(trainer)
        table = start_end_table(history)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(table + "\n")
        plot = plot_history(history, out / self.filename)
        print(f"\nHeld-out validation, start vs end (greedy pass@1, mean tokens):\n{table}\nplot: {plot}\n")
