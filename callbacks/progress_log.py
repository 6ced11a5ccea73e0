"""Progress as plain lines for a log: what the progress bar shows, where no terminal draws it.

``agon fit ... > log 2>&1`` (SLURM, nohup, CI) has no terminal, so the progress bar draws
nothing between the model summary and the final table. Where stdout is not a terminal this
turns the bar off and prints instead, every ``every_n_steps`` training steps and after the last
one, one line:

    step 10/60 | draft alpha/beta: reward 0.412 pass 0.375 | challenge alpha/beta: reward 0.603 pass 0.550 | conversion 0.286 | 2.41 s/step | 2m00s left

(the means over the steps since the previous line, with the adapters that played each role in
them — ``alpha/beta`` where the roles rotated; ``pass`` is the share of correct answers,
``conversion`` the share of wrong drafts the challenger solved), and after every evaluation,
the one before the first step and the one after the last included, one line:

    eval step 20 | pass@1 alpha 0.300 base 0.250 beta 0.325 cascade_ab 0.350 cascade_ba 0.325 deployed 0.350

Seconds per step time the training steps alone; the time left is the steps left at that pace
(evaluations still to come are not counted). Only the global-zero process prints; the numbers
are the ones the module logged, already averaged over every process.
"""

from __future__ import annotations

import math
import sys
import time
from collections import defaultdict
from typing import Any, Literal

import lightning as L

from .protocol import AgonModuleView

Histories = list[tuple[int, dict[str, float]]]
# (column in the line, metric the module logs each step)
ROLE_STATS = (("reward", "reward"), ("pass", "accuracy"))
WHEN = ("no_terminal", "always", "never")


def duration(seconds: float) -> str:
    """``seconds`` as ``45s``, ``2m05s`` or ``1h02m``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(
    step: int,
    total: int | None,
    means: dict[str, float],
    roles: dict[str, str],
    seconds_per_step: float,
) -> str:
    """One progress line.

    Args:
        step: Training steps done.
        total: Steps the run will take (``None`` when unbounded: no total, no time left).
        means: Mean of each logged ``train/...`` metric over the steps the line covers.
        roles: Each role (``draft``, ``challenge``) → the adapters that played it over those
            steps, names joined by ``/`` where the roles rotated between them.
        seconds_per_step: Mean wall time of one training step (evaluations left out).
    """
    parts = [f"step {step}/{total}" if total else f"step {step}"]
    for role in ("draft", "challenge"):
        stats = [
            f"{column} {means[f'train/{role}/{metric}']:.3f}"
            for column, metric in ROLE_STATS
            if f"train/{role}/{metric}" in means
        ]
        if stats:
            parts.append(f"{role} {roles.get(role, '?')}: " + " ".join(stats))
    if "train/conversion_rate" in means:
        parts.append(f"conversion {means['train/conversion_rate']:.3f}")
    # No role (agon sft): its loss. The game's GRPO surrogate loss says little, so it is left out.
    if len(parts) == 1 and "train/loss" in means:
        parts.append(f"loss {means['train/loss']:.3f}")
    parts.append(f"{seconds_per_step:.2f} s/step")
    if total:
        parts.append(f"{duration(max(total - step, 0) * seconds_per_step)} left")
    return " | ".join(parts)


def evaluation_line(step: int, metrics: dict[str, float]) -> str:
    """One line for an evaluation: greedy pass@1 of every policy and cascade (no split prefix)."""
    scores = {
        key[len("val/") : -len("/pass@1")]: value
        for key, value in metrics.items()
        if key.startswith("val/") and key.endswith("/pass@1") and key.count("/") == 2
    }
    listed = " ".join(f"{key} {value:.3f}" for key, value in sorted(scores.items()))
    return f"eval step {step} | pass@1 {listed}" if listed else f"eval step {step} | (no pass@1 logged)"


class ProgressLog(L.Callback):
    """Progress and evaluations as plain lines on stdout when no progress bar can draw.

    Args:
        every_n_steps: A line after steps k, 2k, ... and after the last step (Lightning's
            steps, as in ``metrics.csv``: optimizer steps, ``num_iterations`` per batch).
        when: ``no_terminal`` (print, and turn the progress bar off, only where stdout is
            neither a terminal nor a notebook's: where the bar draws, it stays), ``always``
            (print on a terminal too, beside the bar) or ``never``.
    """

    def __init__(
        self, every_n_steps: int = 5, when: Literal["no_terminal", "always", "never"] = "no_terminal"
    ) -> None:
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        if when not in WHEN:
            raise ValueError(f"when must be one of {WHEN}, got {when!r}")
        self.every_n_steps = every_n_steps
        self.when = when
        self._sums: dict[str, float] = defaultdict(float)
        self._counts: dict[str, int] = defaultdict(int)
        self._adapters: dict[str, set[str]] = defaultdict(set)  # who played each role since the last line
        self._seconds = 0.0  # in training steps since the last line
        self._started: float | None = None
        self._last_line_step = 0
        self._evaluations_printed = 0

    def enabled(self, trainer: L.Trainer) -> bool:
        """Whether this process prints: global zero, and ``when`` allows it here."""
        if self.when == "never" or not trainer.is_global_zero:
            return False
        return self.when == "always" or not bar_draws()

    def setup(self, trainer: L.Trainer, pl_module: AgonModuleView, stage: str) -> None:
        # Where these lines stand in for the bar, the bar draws nothing useful: Rich prints its
        # last frame at teardown, below the run's closing list of outputs, and tqdm writes a
        # carriage-return redraw per step. Off, through the public ProgressBar API.
        bar = trainer.progress_bar_callback
        if stage == "fit" and bar is not None and self.enabled(trainer) and not bar_draws():
            bar.disable()

    def on_fit_start(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        self._evaluations_printed = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        self._last_line_step = trainer.global_step  # a resumed run counts on from its checkpoint
        self._sums.clear()
        self._counts.clear()
        self._adapters.clear()
        self._seconds = 0.0

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: AgonModuleView, batch: Any, batch_idx: int
    ) -> None:
        self._print_new_evaluations(trainer, pl_module)  # the one before the first step
        self._started = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: AgonModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._started is not None:
            self._seconds += time.perf_counter() - self._started
            self._started = None
        record = getattr(pl_module, "last_record", None)  # the game's; agon sft's module has none
        # What this step logged: those every step defines (self.log), and those it defined of the rest
        # (sent to the loggers alone: a rate undefined at a step counts in no mean).
        logged = {**trainer.callback_metrics, **(record.sparse_metrics if record is not None else {})}
        for key, value in logged.items():
            if key.startswith("train/"):
                self._sums[key] += float(value)
                self._counts[key] += 1
        if record is not None:
            self._adapters["draft"].add(record.draft.adapter)
            if record.challenge is not None:
                self._adapters["challenge"].add(record.challenge.adapter)
        # Lightning's steps: optimizer steps (a batch is num_iterations of them), as in metrics.csv
        step, total, k = trainer.global_step, total_steps(trainer), self.every_n_steps
        if step // k == self._last_line_step // k and not (total and step >= total):
            return
        roles = {role: "/".join(sorted(adapters)) for role, adapters in self._adapters.items()}
        means = {key: self._sums[key] / self._counts[key] for key in self._sums}
        seconds = self._seconds / max(step - self._last_line_step, 1)
        self._last_line_step = step
        self._sums.clear()
        self._counts.clear()
        self._adapters.clear()
        self._seconds = 0.0
        if self.enabled(trainer):
            print(progress_line(step, total, means, roles, seconds), flush=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        self._print_new_evaluations(trainer, pl_module)

    def on_fit_end(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        self._print_new_evaluations(trainer, pl_module)  # the one after the last step

    def _print_new_evaluations(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        history: Histories = getattr(getattr(pl_module, "evaluator", None), "history", [])
        new = history[self._evaluations_printed :]
        self._evaluations_printed = len(history)
        if self.enabled(trainer):
            for step, metrics in new:
                print(evaluation_line(step, metrics), flush=True)


def bar_draws() -> bool:
    """Whether a progress bar draws live here: stdout is a terminal, or a Jupyter kernel's (a notebook)."""
    return sys.stdout.isatty() or "ipykernel" in sys.modules


def total_steps(trainer: L.Trainer) -> int | None:
    """The training steps the run will take, or ``None`` when unbounded."""
    total = trainer.estimated_stepping_batches
    return int(total) if math.isfinite(total) else None
