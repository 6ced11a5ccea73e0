"""The run's last lines: where its bundle, logs, tables and plots went.

A run that ends — finished, stopped by a signal, or failed — should not leave its user searching
a tree of folders for what to serve or plot next. :class:`RunOutputs` prints, on global rank zero
and once, every output that exists at the end: the ``last`` bundle (and how to resume from its
checkpoint) or, without a bundle, ``last.ckpt``; the best bundle, the metrics file, the report,
the plots and the JSON-lines tables.
The run directory is read in ``setup`` on every rank (it is a collective; see ``run_files``).
"""

from __future__ import annotations

from pathlib import Path

import lightning as L

from .run_files import RunDir

# What a run may write in its run directory, in the order it is listed.
RUN_FILES = (
    ("metrics.csv", "metrics"),
    ("report.md", "start-vs-end table"),
    ("validation.png", "validation curves"),
    ("outcomes.jsonl", "last evaluation, problem by problem"),
    ("samples.jsonl", "sample games"),
    ("trace_lengths.jsonl", "trace lengths per step"),
    ("config.yaml", "the whole config"),
)


def output_lines(run_dir: Path, checkpoint_dirs: list[Path]) -> list[str]:
    """One line per output that exists: bundles first, then the run directory's files."""
    lines = []
    run_dir = shown(run_dir)
    for directory in map(shown, checkpoint_dirs):
        last = directory / "last"
        if (last / "agon.json").exists():
            lines.append(f"  {last}  (the last bundle: agon serve --bundle {last}; resume: --ckpt_path last)")
        elif (directory / "last.ckpt").exists():  # a checkpoint without a bundle (agon sft's)
            lines.append(f"  {directory / 'last.ckpt'}  (resume: --ckpt_path last)")
        for best in sorted(directory.glob("best-*")):
            if (best / "agon.json").exists():
                lines.append(f"  {best}  (the best bundle by the checkpoint's monitor)")
    for name, what in RUN_FILES:
        path = run_dir / name
        if path.exists():
            lines.append(f"  {path}  ({what})")
    if any(run_dir.glob("events.out.tfevents.*")):
        lines.append(f"  {run_dir}  (TensorBoard: tensorboard --logdir {run_dir.parent})")
    return lines


def shown(path: Path) -> Path:
    """``path`` relative to the working directory where it lies under it (as the config wrote it)."""
    path = Path(path)
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        return path.relative_to(Path.cwd())
    return path


class RunOutputs(L.Callback):
    """At the end of ``fit`` (or when it fails), print where the run's outputs are.

    Printed at ``teardown``, after every callback's and the module's ``on_fit_end`` (the report,
    ``agon sft``'s model) have written theirs; a run stopped by an exception or a signal (which
    Lightning tears down without that hook) prints from ``on_exception``.
    """

    def __init__(self) -> None:
        self._run_dir = RunDir()
        self._printed = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._run_dir.locate(trainer)  # a collective: here, on every rank
        self._printed = False

    def _print(self, trainer: L.Trainer) -> None:
        run_dir = self._run_dir.located  # found in setup (a collective); a run that failed before it has none
        if self._printed or run_dir is None or not trainer.is_global_zero:
            return
        self._printed = True
        dirs = [Path(cb.dirpath) for cb in trainer.checkpoint_callbacks if getattr(cb, "dirpath", None)]
        lines = output_lines(run_dir, dirs)
        if lines:
            print("\nOutputs of this run:\n" + "\n".join(lines), flush=True)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._print(trainer)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if not getattr(exception, "refused", False):  # a refused run (another run's directory) has no outputs
            self._print(trainer)
