"""Trace lengths per role and step: the paper's "shorter traces" evidence, ready to plot.

Agon claims competition shortens reasoning (3.5k vs 8.1k tokens for GRPO) with higher
accuracy, so length has to be watched as closely as reward. For every training step, from
``module.last_record`` (no extra generation), and for each role of the game (Agon's ``draft``, ``challenge``):

* completion tokens: mean, p50, p90, max; and the truncation rate;
* the split of each completion into its ``<think>`` trace and its post-reasoning summary
  (the text after the trace, minus the final answer), in tokens.

After each validation the same is computed for every evaluated policy and cascade
(``base``, ``alpha``, ``beta``, ``cascade_ab``, ...), from the evaluator's decoded outputs.
Those are re-tokenised, so their lengths leave out the EOS token, and a completion counts as
truncated when it fills the whole ``max_new_tokens`` budget.

Metrics are logged as ``trace/{role}/{stat}`` and ``trace/val/{key}/{stat}``; the same
numbers are appended as tidy rows (``step``, ``split``, ``role``, stats) to
``trace_lengths.jsonl`` in the run directory, and :func:`plot_trace_lengths` draws them.
A train row's ``step`` is the step's index (as in ``metrics.csv``); a validation row's is the
number of steps trained.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor

from agon_lightning.game.text import after_thinking, remove_final_answer, thinking_part
from agon_lightning.training.step_metrics import by_role, role_prefix

from .protocol import AgonModuleView
from .run_files import RunDir, append_jsonl, log_step_metrics, read_jsonl

FILENAME = "trace_lengths.jsonl"
STATS = ("tokens_mean", "tokens_p50", "tokens_p90", "tokens_max", "truncation_rate",
         "think_tokens_mean", "summary_tokens_mean")  # fmt: skip


def summary_part(text: str) -> str:
    """The post-reasoning summary: after the ``<think>`` trace, without the final answer."""
    tail = after_thinking(text)
    return "" if tail is None else remove_final_answer(tail)


def token_counts(tokenizer: Any, texts: list[str]) -> Tensor:
    """Tokens in each text (no special tokens added): ``[len(texts)]``."""
    if not texts:
        return torch.zeros(0, dtype=torch.long)
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return torch.tensor([len(x) for x in ids], dtype=torch.long)


def length_stats(tokens: Tensor, truncated: Tensor, think: Tensor, summary: Tensor) -> dict[str, float]:
    """The :data:`STATS` of one role's completions (all tensors ``[B]``, ``B >= 1``)."""
    t = tokens.float()
    return {
        "tokens_mean": float(t.mean()),
        "tokens_p50": float(t.quantile(0.5)),
        "tokens_p90": float(t.quantile(0.9)),
        "tokens_max": float(t.max()),
        "truncation_rate": float(truncated.float().mean()),
        "think_tokens_mean": float(think.float().mean()),
        "summary_tokens_mean": float(summary.float().mean()),
    }


def text_stats(tokenizer: Any, texts: list[str], tokens: Tensor, truncated: Tensor) -> dict[str, float]:
    """:func:`length_stats` with the trace / summary split measured from ``texts``."""
    parts = token_counts(tokenizer, [thinking_part(t) for t in texts] + [summary_part(t) for t in texts])
    return length_stats(tokens, truncated, parts[: len(texts)], parts[len(texts) :])


class TraceLengthMonitor(L.Callback):
    """Logs completion, trace and summary lengths per role (training) and per policy (validation).

    Args:
        every_n_steps: Measure every this many training steps.
        validation: Also measure after each validation.
        filename: JSON-lines file in the run directory (``None``: log only).
    """

    def __init__(
        self, every_n_steps: int = 1, validation: bool = True, filename: str | None = FILENAME
    ) -> None:
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.validation = validation
        self.filename = filename
        self._val_texts: dict[str, list[str]] = defaultdict(list)
        self._run_dir = RunDir()

    def setup(self, trainer: L.Trainer, pl_module: AgonModuleView, stage: str) -> None:
        self._run_dir.locate(trainer)  # a collective: here, on every rank

    def _write(self, trainer: L.Trainer, rows: list[dict[str, Any]]) -> None:
        if self.filename is not None:
            append_jsonl(trainer, self._run_dir.locate(trainer), self.filename, rows)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: AgonModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        record = pl_module.last_record
        if record is None or record.step % self.every_n_steps:
            return
        rows = []
        # Every role of the game (Agon's as draft and challenge); a role played in several rounds, as one.
        for role, parts in by_role(record).items():
            texts = [t for r in parts for t in r.rollouts.texts]
            lengths = torch.cat([r.rollouts.lengths.cpu() for r in parts])
            truncated = torch.cat([r.rollouts.truncated.cpu() for r in parts])
            stats = text_stats(pl_module.tokenizer, texts, lengths, truncated)
            adapter = ",".join(dict.fromkeys(r.adapter for r in parts))
            rows.append(
                {
                    "step": record.step,
                    "split": "train",
                    "role": role_prefix(role),
                    "adapter": adapter,
                    **stats,
                }
            )
        log_step_metrics(trainer, {f"trace/{r['role']}/{k}": r[k] for r in rows for k in STATS}, record.step)
        self._write(trainer, rows)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        self._val_texts.clear()

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: AgonModuleView, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        if not self.validation or trainer.sanity_checking:
            return
        for sample in pl_module.evaluator.last_outputs:
            for key, out in sample.items():
                self._val_texts[key].append(out["text"])

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: AgonModuleView) -> None:
        if not self._val_texts:
            return
        budget = pl_module.rollout.max_new_tokens
        rows = []
        for key, texts in self._val_texts.items():
            tokens = token_counts(pl_module.tokenizer, texts)
            stats = text_stats(pl_module.tokenizer, texts, tokens, tokens >= budget)
            rows.append({"step": pl_module.agon_step, "split": "val", "role": key, **stats})
        self._val_texts.clear()
        # Through self.log: these land in the validation row of metrics.csv, next to val/*.
        pl_module.log_dict({f"trace/val/{r['role']}/{k}": r[k] for r in rows for k in STATS}, batch_size=1)
        self._write(trainer, rows)


def plot_trace_lengths(path: str | Path, output: str | Path | None = None, stat: str = "tokens_mean") -> Any:
    """Plot ``stat`` and the trace / summary split against steps from ``trace_lengths.jsonl``.

    One panel for training (per role) and one for validation (per policy). Returns the
    matplotlib figure; saves it to ``output`` when given.
    """
    from matplotlib.figure import Figure  # no pyplot: leaves the caller's backend alone

    if stat not in STATS:
        raise ValueError(f"stat must be one of {STATS}, got {stat!r}")
    rows = read_jsonl(path)
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, split in zip(axes, ("train", "val")):
        series: dict[str, list[dict]] = defaultdict(list)
        for row in rows:
            if row["split"] == split:
                series[row["role"]].append(row)
        for role, points in sorted(series.items()):
            steps = [p["step"] for p in points]
            (line,) = ax.plot(steps, [p[stat] for p in points], label=f"{role} {stat}")
            ax.plot(steps, [p["think_tokens_mean"] for p in points], ls="--", color=line.get_color(),
                    label=f"{role} <think>")  # fmt: skip
            ax.plot(steps, [p["summary_tokens_mean"] for p in points], ls=":", color=line.get_color(),
                    label=f"{role} summary")  # fmt: skip
        ax.set_title(split)
        ax.set_xlabel("step")
        if series:
            ax.legend(fontsize="x-small")
    axes[0].set_ylabel("tokens")
    fig.tight_layout()
    if output is not None:
        fig.savefig(output)
    return fig
