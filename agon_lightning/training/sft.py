"""Supervised warm-start (SFT): teach a base the completion format and half the task.

RL only has signal where some samples are right, so Agon needs a base that already solves
part of its problems. This module trains one on worked solutions (:mod:`agon_lightning.testbeds.chain_sum.traces`)
in exactly the prompts RL will use, for both roles: the drafter's plain problem prompt (which
is also what the no-exchange ablation's challenger reads), and the challenger's
problem-plus-rival-summary prompt, where the rival's draft is right, has a slipped step, wrote
up only part of its work, or was cut off inside its trace (an empty summary) — every summary a
challenger can meet in RL — and the target is always the correct solution. The loss covers
completion tokens only.

Training stops on an *evaluated* threshold (greedy accuracy on held-out problems, see
:class:`StopAtThreshold`) rather than a step count: competence arrives as a jump whose
timing varies, and stopping at partial competence leaves RL room to improve. At the end the
model, tokenizer and evaluation history are written to ``output_dir``, which ``agon fit``
loads as ``model_name_or_path``.

The examples and their data module are in :mod:`agon_lightning.training.sft_data`; this module holds
the model that learns from them and the stopping rule; the command is :mod:`agon_lightning.cli.sft`.
Run it with ``agon sft --config configs/sft_tiny.yaml``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from agon_lightning.data.base import reopen_stopped_epoch, restore_loader_position
from agon_lightning.game.prompts import Prompts
from agon_lightning.infra.model_source import resolve_model_path
from agon_lightning.infra.tiny import TinyArchitecture, build_tokenizer
from agon_lightning.rollout.base import Rollout
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.summarizers.basic import StripTraceSummarizer
from agon_lightning.training.sft_data import RIVALS, SFTDataModule, SFTExample  # noqa: F401  (imported from here too)
from agon_lightning.verifiers.base import Verifier
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier

# ---------------------------------------------------------------------------------------------
# The module
# ---------------------------------------------------------------------------------------------


def encode_sft_batch(tokenizer: Any, prompts: list[str], targets: list[str]) -> dict[str, Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` for prompt + target + EOS.

    ``labels`` is ``-100`` on prompt and padding tokens, so the loss covers the completion only.
    """
    rows, label_rows = [], []
    for prompt, target in zip(prompts, targets, strict=True):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        target_ids = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt_ids + target_ids)
        label_rows.append([-100] * len(prompt_ids) + target_ids)
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)  # [B, T]
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, label_row) in enumerate(zip(rows, label_rows, strict=True)):
        input_ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(row)] = torch.tensor(label_row)
        attention_mask[i, : len(row)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


METRIC_GROUPS = ("draft", *(f"challenge_{rival}" for rival in RIVALS))


class SFTModule(L.LightningModule):
    """Fine-tunes a causal LM on worked solutions; evaluates held-out greedy accuracy per role.

    Logged every validation: ``val/draft_acc`` (the drafter's accuracy, the number to stop on),
    ``val/challenge_{right,slipped,partial,empty}_acc`` (the challenger's accuracy when the
    rival's summary is right, has a slipped step, is partial, or is empty), and ``val/truncated``.

    Args:
        model_name_or_path: A local model directory, a Hub name, or ``agon:NAME`` for a shipped
            model, to fine-tune further. ``None`` builds
            a fresh tiny Qwen3 with the character tokenizer of :mod:`agon_lightning.infra.tiny`.
        architecture: Shape of the fresh model (only when ``model_name_or_path`` is ``None``).
        prompts: Prompt templates; use the RL run's, so SFT prompts are the ones RL sends.
        verifier: Grades held-out completions (default: reasoning-gym's scorer, full credit only).
        summarizer: Turns a rival draft into what the challenger reads (default: the text after
            the trace, minus the answer).
        rollout: Generates held-out completions; evaluation is greedy.
        learning_rate: AdamW peak learning rate (after a linear warmup, then constant).
        weight_decay: AdamW weight decay.
        warmup_steps: Steps of linear warmup.
        output_dir: Where the model, tokenizer and evaluation history are written at the end of
            ``fit`` (``None``: nothing is written).
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        architecture: TinyArchitecture | None = None,
        prompts: Prompts | None = None,
        verifier: Verifier | None = None,
        summarizer: Summarizer | None = None,
        rollout: Rollout | None = None,
        learning_rate: float = 1e-3,
        weight_decay: float = 0.0,
        warmup_steps: int = 100,
        output_dir: str | None = None,
    ) -> None:
        super().__init__()
        from transformers import AutoTokenizer, Qwen3ForCausalLM

        from agon_lightning.adapters.policy import load_causal_lm

        if model_name_or_path is not None and architecture is not None:
            raise ValueError(
                "architecture shapes a fresh model and cannot be combined with "
                f"model_name_or_path={model_name_or_path!r}"
            )
        if learning_rate <= 0 or weight_decay < 0 or warmup_steps < 0:
            raise ValueError(
                f"need learning_rate > 0, weight_decay >= 0, warmup_steps >= 0; "
                f"got {learning_rate}, {weight_decay}, {warmup_steps}"
            )
        if model_name_or_path is None:
            self.tokenizer = build_tokenizer()
            self.model = Qwen3ForCausalLM((architecture or TinyArchitecture()).config(self.tokenizer))
        else:
            path = resolve_model_path(model_name_or_path)
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = load_causal_lm(path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # Generation pads prompts on the left; training batches are padded by encode_sft_batch.
        self.tokenizer.padding_side = "left"
        self.prompts = prompts or Prompts()
        self.verifier = verifier or ReasoningGymVerifier()
        self.summarizer = summarizer or StripTraceSummarizer()
        self.rollout = rollout or HFRollout(max_new_tokens=80)
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.warmup_steps = warmup_steps
        self.output_dir = output_dir
        self.history: list[dict[str, float]] = []

    def prompt(self, example: SFTExample) -> str:
        """The prompt RL would send for ``example``'s role."""
        if example.rival_draft is None:
            return self.prompts.draft_prompt(self.tokenizer, example.problem)
        summary = self.summarizer.summarize(example.rival_draft, example.problem)
        return self.prompts.challenge_prompt(self.tokenizer, example.problem, summary)

    def training_step(self, batch: list[SFTExample], batch_idx: int) -> Tensor:
        enc = encode_sft_batch(self.tokenizer, [self.prompt(e) for e in batch], [e.target for e in batch])
        loss = self.model(**{k: v.to(self.device) for k, v in enc.items()}).loss
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def validation_step(self, batch: list[SFTExample], batch_idx: int) -> None:
        out = self.rollout.generate(self.model, self.tokenizer, [self.prompt(e) for e in batch], greedy=True)
        verdicts = self.verifier.verify_batch(out.texts, [e.problem for e in batch])
        for group in METRIC_GROUPS:
            correct = [v.correct for e, v in zip(batch, verdicts, strict=True) if e.kind == group]
            if correct:
                acc = sum(correct) / len(correct)
                self.log(
                    f"val/{group}_acc",
                    acc,
                    prog_bar=group == "draft",
                    batch_size=len(correct),
                    sync_dist=True,
                )
        self.log("val/truncated", out.truncated.float().mean(), batch_size=len(batch), sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        # Before the checkpoint callbacks' on_validation_end, so a checkpoint holds this record.
        if self.trainer.sanity_checking:
            return
        record = {"step": self.trainer.global_step}
        record |= {
            k: round(float(v), 4) for k, v in self.trainer.callback_metrics.items() if k.startswith("val/")
        }
        self.history.append(record)
        self.print("  ".join(f"{k}={v}" for k, v in record.items()))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The evaluation history travels with the weights, so a resumed run writes all of it.
        checkpoint["sft_eval_history"] = list(self.history)
        reopen_stopped_epoch(checkpoint, self.trainer.num_training_batches)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.history = list(checkpoint.get("sft_eval_history", []))
        # Before the loops are restored: a checkpoint from before the loader kept its place resumes mid-epoch too.
        if restore_loader_position(checkpoint):
            rank_zero_info(
                "the checkpoint holds no data position; resuming after the batches its progress counts"
            )

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay
        )
        warmup = max(self.warmup_steps, 1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_fit_end(self) -> None:
        if self.output_dir is not None and self.trainer.is_global_zero:
            self.save_pretrained(self.output_dir)

    def save_pretrained(self, output_dir: str | Path) -> None:
        """Write the model, the tokenizer and ``sft_eval.json`` (the evaluation history)."""
        path = Path(output_dir)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        report = {"global_step": self.trainer.global_step, "evaluations": self.history}
        (path / "sft_eval.json").write_text(json.dumps(report, indent=1) + "\n")
        rank_zero_info(f"SFT model written to {path}")


class StopAtThreshold(L.Callback):
    """Stops training as soon as an evaluated metric crosses a threshold.

    Unlike ``EarlyStopping``, it never stops for lack of progress: a small model's held-out
    accuracy can sit flat for many evaluations before it jumps.

    Args:
        monitor: A metric logged during validation.
        threshold: Stop once ``monitor >= threshold`` (``mode="max"``) or ``<=`` (``mode="min"``).
        mode: ``"max"`` or ``"min"``.
    """

    def __init__(self, monitor: str = "val/draft_acc", threshold: float = 0.35, mode: str = "max") -> None:
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.monitor = monitor
        self.threshold = threshold
        self.mode = mode
        self.stopped_at: int | None = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if self.monitor not in trainer.callback_metrics:
            raise KeyError(
                f"StopAtThreshold monitors {self.monitor!r}, which validation did not log; "
                f"logged: {sorted(trainer.callback_metrics)}"
            )
        value = float(trainer.callback_metrics[self.monitor])
        if value >= self.threshold if self.mode == "max" else value <= self.threshold:
            self.stopped_at = trainer.global_step
            trainer.should_stop = True
            rank_zero_info(
                f"{self.monitor}={value:.4f} reached {self.threshold} at step {trainer.global_step}: stopping"
            )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.stopped_at is None:
            rank_zero_warn(
                f"{self.monitor} never reached {self.threshold} in {trainer.global_step} steps; "
                "the last model is written anyway"
            )
