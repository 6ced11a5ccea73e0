"""The Agon game as a LightningModule: two adapters, one base, roles that rotate.

One training step on P problems:

1. the *drafter* samples N rollouts per problem and is graded on correctness (GRPO);
2. the summarizer turns each draft a_i into what the challenger may read;
3. the *challenger* answers each problem once per draft, reading its summary, so its N
   answers b_i form a group too, and is graded by the reward component (correctness +
   conversion bonus + optional length tiebreak);
4. both adapters are updated in one joint backward through one optimizer (one parameter
   group per adapter), so every trainable parameter takes part in every backward (DDP
   needs no unused-parameter search, DeepSpeed gets the single optimizer it accepts).

``game="grpo"`` plays only step 1 with one adapter: the vanilla baseline on the same code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import lightning as L
import torch
from jsonargparse import lazy_instance
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor

from agon_lightning.cascade import challenge, solve_batch
from agon_lightning.grpo import (
    AGGREGATIONS,
    LossNormalizer,
    clipped_policy_loss,
    group_advantages,
    token_logprobs,
)
from agon_lightning.policy import (
    BASE_ADAPTER,
    LoraOptions,
    activate,
    adapter_parameters,
    attach_adapters,
    completion_hidden_states,
    generating,
    load_base,
    output_weight,
    sample_with,
)
from agon_lightning.prompts import Prompts
from agon_lightning.rewards import CompetitiveReward, Reward
from agon_lightning.rollout import HFRollout, Rollout, RolloutBatch
from agon_lightning.schedule import SCHEDULES, adapters_for, roles_for_step
from agon_lightning.strategies import full_parameters
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.summarizers.basic import StripTraceSummarizer
from agon_lightning.types import Problem, Verdict
from agon_lightning.validation import CascadeEvaluator
from agon_lightning.verifiers.base import Verifier
from agon_lightning.verifiers.exact import ExactMatchVerifier

DEFAULT_BASE = "agon:tiny-qwen3"


@dataclass
class GRPOOptions:
    """The policy-gradient settings, shared by both roles.

    Attributes:
        num_generations: N, rollouts per problem (the group size).
        scale_std: Divide advantages by the group std (``False`` = Dr. GRPO centring only).
        epsilon_low: Lower clip range of the importance ratio.
        epsilon_high: Upper clip range (``> epsilon_low`` is DAPO's clip-higher).
        num_iterations: μ, optimizer steps on the same rollouts.
        kl_beta: β, weight of the KL to the frozen base (0 = no reference pass at all).
        loss_aggregation: ``token_mean`` | ``seq_mean`` | ``dr_grpo``.
        mask_truncated: Drop completions that hit ``max_new_tokens`` from the loss.
        logprob_chunk_size: Tokens per chunk when computing log-probs from hidden states.
        micro_batch_size: Sequences per role per backward (0 = the whole step at once).
    """

    num_generations: int = 8
    scale_std: bool = True
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    num_iterations: int = 1
    kl_beta: float = 0.0
    loss_aggregation: str = "token_mean"
    mask_truncated: bool = False
    logprob_chunk_size: int = 1024
    micro_batch_size: int = 0

    def __post_init__(self) -> None:
        if self.num_generations < 2:
            raise ValueError(
                f"grpo.num_generations (N) must be >= 2 for group advantages, got {self.num_generations}"
            )
        if self.num_iterations < 1:
            raise ValueError(f"grpo.num_iterations (μ) must be >= 1, got {self.num_iterations}")
        if self.epsilon_low < 0 or self.epsilon_high < 0:
            raise ValueError(
                f"grpo.epsilon_low/high must be >= 0, got {self.epsilon_low}/{self.epsilon_high}"
            )
        if self.kl_beta < 0:
            raise ValueError(f"grpo.kl_beta must be >= 0, got {self.kl_beta}")
        if self.loss_aggregation not in AGGREGATIONS:
            raise ValueError(
                f"grpo.loss_aggregation must be one of {AGGREGATIONS}, got {self.loss_aggregation!r}"
            )
        if self.micro_batch_size < 0:
            raise ValueError(f"grpo.micro_batch_size must be >= 0, got {self.micro_batch_size}")


@dataclass
class RoleRollout:
    """One role's rollouts in a step, with their verdicts and rewards."""

    adapter: str
    rollouts: RolloutBatch
    verdicts: list[Verdict]
    rewards: Tensor
    advantages: Tensor = field(default_factory=lambda: torch.zeros(0))
    old_logp: Tensor | None = None

    @property
    def correct(self) -> Tensor:
        return torch.tensor([v.correct for v in self.verdicts], dtype=torch.float32)


@dataclass
class StepRecord:
    """What happened in the last training step, for callbacks (samples, lengths, divergence)."""

    step: int
    problems: list[Problem]
    draft: RoleRollout
    summaries: list[str] = field(default_factory=list)
    challenge: RoleRollout | None = None


class AgonModule(L.LightningModule):
    """Two LoRA policies on one frozen base, trained by the Agon game.

    Args:
        model_name_or_path: A Hub id, a local directory, or ``agon:NAME`` for a model shipped
            with the package.
        dtype: ``float32`` | ``bfloat16`` | ``float16`` for the base weights.
        game: ``agon`` (drafter + challenger) or ``grpo`` (one adapter, drafts only).
        schedule: ``rotate`` | ``fixed`` | ``self_play`` (see :mod:`agon_lightning.schedule`).
        lora: Adapter settings.
        grpo: Policy-gradient settings.
        rollout: Sampling backend and settings.
        verifier: Judges completions.
        summarizer: What of a draft the challenger reads.
        reward: Verdicts → rewards for both roles.
        prompts: Prompt templates for both roles.
        optimizer: One optimizer over one parameter group per adapter.
        lr_scheduler: Optional scheduler, stepped once per optimizer step.
        max_grad_norm: Clip the global gradient norm (``None`` = no clipping).
        gradient_checkpointing: Recompute the base's activations in the backward.
        validate_at_start: Evaluate once before the first step, so curves start at the base.
        evaluate_moa: Also evaluate ``moa``: the untrained base drafting and answering after
            reading its own summary (the Mixture-of-Agents reference).
    """

    def __init__(
        self,
        model_name_or_path: str = DEFAULT_BASE,
        dtype: str = "float32",
        game: Literal["agon", "grpo"] = "agon",
        schedule: Literal["rotate", "fixed", "self_play"] = "rotate",
        lora: LoraOptions = LoraOptions(),
        grpo: GRPOOptions = GRPOOptions(),
        rollout: Rollout = lazy_instance(HFRollout),
        verifier: Verifier = lazy_instance(ExactMatchVerifier),
        summarizer: Summarizer = lazy_instance(StripTraceSummarizer),
        reward: Reward = lazy_instance(CompetitiveReward),
        prompts: Prompts = Prompts(),
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        max_grad_norm: float | None = 1.0,
        gradient_checkpointing: bool = False,
        validate_at_start: bool = True,
        evaluate_moa: bool = False,
    ) -> None:
        super().__init__()
        if game not in ("agon", "grpo"):
            raise ValueError(f"game must be 'agon' or 'grpo', got {game!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        if max_grad_norm is not None and max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or null, got {max_grad_norm}")
        self.save_hyperparameters(
            ignore=["rollout", "verifier", "summarizer", "reward", "optimizer", "lr_scheduler"]
        )
        self.automatic_optimization = False
        self.strict_loading = False  # checkpoints hold the adapters only, not the frozen base
        self.model_name_or_path = model_name_or_path
        self.dtype_name = dtype
        self.game = game
        self.schedule = schedule
        self.lora = lora
        self.grpo = grpo
        self.rollout = rollout
        self.verifier = verifier
        self.summarizer = summarizer
        self.reward = reward
        self.prompts = prompts
        self.optimizer_factory = optimizer
        self.scheduler_factory = lr_scheduler
        self.max_grad_norm = max_grad_norm
        self.gradient_checkpointing = gradient_checkpointing
        self.validate_at_start = validate_at_start
        self.adapter_names = adapters_for(schedule, game)
        self.agon_step = 0  # game steps taken; drives the role schedule, saved in checkpoints
        self.policy: Any = None
        self.tokenizer: Any = None
        self.last_record: StepRecord | None = None
        self.evaluator = CascadeEvaluator(self.adapter_names, game, moa=evaluate_moa)

    # ------------------------------------------------------------------ set-up
    def configure_model(self) -> None:
        if self.policy is not None:
            return
        base, self.tokenizer = load_base(self.model_name_or_path, self.dtype_name)
        if self.gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            base.enable_input_require_grads()
        self.policy = attach_adapters(base, self.adapter_names, self.lora)
        self._trainable = [p for name in self.adapter_names for p in adapter_parameters(self.policy, name)]
        for p in self._trainable:
            p.requires_grad_(True)

    def setup(self, stage: str) -> None:
        # DeepSpeed clips inside its engine (Lightning's clip_gradients is a no-op there).
        config = getattr(getattr(self.trainer, "strategy", None), "config", None)
        if isinstance(config, dict) and self.max_grad_norm is not None:
            config.setdefault("gradient_clipping", self.max_grad_norm)

    def configure_optimizers(self) -> Any:
        groups = [{"params": adapter_parameters(self.policy, n), "name": n} for n in self.adapter_names]
        optimizer = self.optimizer_factory(groups)
        if self.scheduler_factory is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.scheduler_factory(optimizer)}}

    # ------------------------------------------------------------------ rollouts
    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        """Sample with ``adapter`` (``None`` = the base with adapters disabled)."""
        return sample_with(
            self.policy, self.rollout, self.tokenizer, adapter, prompts, num_samples, greedy, self._trainable
        )

    def sample_mixed(
        self, adapters: list[str | None], prompts: list[str], greedy: bool = False
    ) -> RolloutBatch:
        """One sample per prompt, prompt ``i`` with ``adapters[i]`` (``None`` = the base), in one batch."""
        names = [BASE_ADAPTER if a is None else a for a in adapters]
        with generating(self.policy):
            return self.rollout.generate(self.policy, self.tokenizer, prompts, 1, greedy, adapter_names=names)

    def _play(self, problems: list[Problem]) -> StepRecord:
        """Generate, verify and reward both roles for one step (no gradients)."""
        n = self.grpo.num_generations
        # GRPO has one adapter, which drafts every step whatever the schedule says.
        drafter, challenger = roles_for_step(
            self.agon_step, self.schedule if self.game == "agon" else "fixed"
        )
        draft_prompts = [self.prompts.draft_prompt(self.tokenizer, p) for p in problems]
        drafts = self.sample(drafter, draft_prompts, n)
        grouped = [p for p in problems for _ in range(n)]
        draft_verdicts = self.verifier.verify_batch(drafts.texts, grouped)
        draft_correct = torch.tensor([v.correct for v in draft_verdicts], dtype=torch.float32)
        record = StepRecord(
            self.agon_step, problems, RoleRollout(drafter, drafts, draft_verdicts, draft_correct)
        )
        if self.game == "grpo":
            record.draft.rewards = self.reward(draft_correct).draft
            return record
        record.summaries, challenges = challenge(self, grouped, drafts, challenger, greedy=False)
        challenge_verdicts = self.verifier.verify_batch(challenges.texts, grouped)
        challenge_correct = torch.tensor([v.correct for v in challenge_verdicts], dtype=torch.float32)
        rewards = self.reward(
            draft_correct, challenge_correct, drafts.lengths.cpu(), challenges.lengths.cpu()
        )
        record.draft.rewards = rewards.draft
        record.challenge = RoleRollout(challenger, challenges, challenge_verdicts, rewards.challenge)
        return record

    # ------------------------------------------------------------------ update
    def _logprobs(self, adapter: str | None, rb: RolloutBatch) -> tuple[Tensor, Tensor]:
        if adapter is None:
            with self.policy.disable_adapter():
                hidden = completion_hidden_states(
                    self.policy, rb.prompt_ids, rb.prompt_mask, rb.completion_ids, rb.completion_mask
                )
                return token_logprobs(hidden, output_weight(self.policy), rb.completion_ids,
                                      self._temperature, self.grpo.logprob_chunk_size)  # fmt: skip
        activate(self.policy, adapter, self._trainable)
        hidden = completion_hidden_states(
            self.policy, rb.prompt_ids, rb.prompt_mask, rb.completion_ids, rb.completion_mask
        )
        return token_logprobs(hidden, output_weight(self.policy), rb.completion_ids, self._temperature,
                              self.grpo.logprob_chunk_size)  # fmt: skip

    @property
    def _temperature(self) -> float:
        return float(getattr(self.rollout, "temperature", 1.0))

    def _loss_mask(self, rb: RolloutBatch) -> Tensor:
        mask = rb.completion_mask
        if self.grpo.mask_truncated:
            mask = mask * (~rb.truncated).long().unsqueeze(1)
        return mask

    def _role_loss(
        self, role: RoleRollout, rows: slice, norm: LossNormalizer
    ) -> tuple[Tensor, dict[str, Tensor]]:
        rb = role.rollouts.select(rows)
        logp, entropy = self._logprobs(role.adapter, rb)
        old = logp.detach() if role.old_logp is None else role.old_logp[rows]
        ref = None
        if self.grpo.kl_beta > 0:
            with torch.no_grad():
                ref, _ = self._logprobs(None, rb)
        mask = self._loss_mask(rb)
        loss, stats = clipped_policy_loss(
            logp, old, role.advantages[rows].to(logp.device), mask, norm, self.grpo.epsilon_low,
            self.grpo.epsilon_high, self.grpo.loss_aggregation, ref, self.grpo.kl_beta,
        )  # fmt: skip
        stats["entropy"] = (entropy * mask).sum() / mask.sum().clamp(min=1)
        return loss, stats

    def _update(self, roles: list[RoleRollout]) -> dict[str, float]:
        opt = self.optimizers()
        total = len(roles[0].rollouts)
        mb = self.grpo.micro_batch_size or total
        norms = [
            LossNormalizer(
                len(r.rollouts), int(self._loss_mask(r.rollouts).sum()), self.rollout.max_new_tokens
            )
            for r in roles
        ]
        if self.grpo.num_iterations > 1:  # the sampling policy's log-probs, before any update
            with torch.no_grad():
                for r in roles:  # in micro-batches too: micro_batch_size bounds every forward
                    r.old_logp = torch.cat(
                        [
                            self._logprobs(r.adapter, r.rollouts.select(slice(i, i + mb)))[0]
                            for i in range(0, total, mb)
                        ]
                    )
        stats_sum: dict[str, float] = {}
        for _ in range(self.grpo.num_iterations):
            opt.zero_grad(set_to_none=True)
            for start in range(0, total, mb):
                rows = slice(start, start + mb)
                loss = torch.zeros((), device=self.device)
                for r, norm in zip(roles, norms):
                    role_loss, stats = self._role_loss(r, rows, norm)
                    loss = loss + role_loss
                    share = min(mb, total - start) / total / len(roles) / self.grpo.num_iterations
                    for k, v in stats.items():
                        stats_sum[k] = stats_sum.get(k, 0.0) + float(v) * share
                    stats_sum["loss"] = (
                        stats_sum.get("loss", 0.0) + float(role_loss.detach()) / self.grpo.num_iterations
                    )
                self.manual_backward(loss)
            if self.max_grad_norm is not None:
                self.clip_gradients(opt, gradient_clip_val=self.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()
            scheduler = self.lr_schedulers()
            if scheduler is not None:
                scheduler.step()
        return stats_sum

    def training_step(self, batch: list[Problem], batch_idx: int) -> None:
        t0 = time.perf_counter()
        record = self._play(batch)
        t1 = time.perf_counter()
        n = self.grpo.num_generations
        roles = [record.draft] + ([record.challenge] if record.challenge is not None else [])
        zero_std = []
        for role in roles:
            role.advantages, zs = group_advantages(role.rewards, n, self.grpo.scale_std)
            zero_std.append(zs.float())
        stats = self._update(roles)
        t2 = time.perf_counter()
        metrics = step_metrics(record)
        metrics.update({f"train/{k}": v for k, v in stats.items()})
        metrics["train/frac_zero_std_groups"] = float(torch.cat(zero_std).mean())
        metrics["time/generate_s"] = t1 - t0
        metrics["time/update_s"] = t2 - t1
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=len(batch), sync_dist=True)
        self.last_record = record
        self.agon_step += 1

    # ------------------------------------------------------------------ validation
    def _evaluate_outside_loop(self) -> None:
        """Evaluate where Lightning's validation loop does not run (before and after fit)."""
        datamodule = self.trainer.datamodule
        if datamodule is None or self.trainer.limit_val_batches == 0:
            return
        with full_parameters(self.trainer):
            metrics = self.evaluator.run(self, datamodule.val_dataloader())
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.global_step)
        self.evaluator.history.append((self.global_step, metrics))

    def on_train_start(self) -> None:
        if self.validate_at_start and self.agon_step == 0:
            self._evaluate_outside_loop()

    def on_train_end(self) -> None:
        # The final point of the curve, unless the last validation already ran at this step.
        if self.validate_at_start and (
            not self.evaluator.history or self.evaluator.history[-1][0] != self.global_step
        ):
            self._evaluate_outside_loop()

    def validation_step(self, batch: list[Problem], batch_idx: int) -> None:
        self.evaluator.update(self, batch)

    def on_validation_epoch_end(self) -> None:
        metrics = self.evaluator.compute()
        # A logged "step" makes loggers file the point at global_step, like the evaluations outside
        # the loop (Lightning's default inside fit is one step earlier: batches stepped minus one).
        self.log_dict({**metrics, "step": float(self.global_step)}, sync_dist=False)
        if not self.trainer.sanity_checking and self.trainer.state.fn == "fit":
            self.evaluator.history.append((self.global_step, metrics))

    test_step = validation_step
    on_test_epoch_end = on_validation_epoch_end

    # ------------------------------------------------------------------ prediction
    def predict_step(self, batch: list[Problem], batch_idx: int) -> list[dict[str, Any]]:
        """The greedy cascade on each problem (the first adapter drafts), as JSON-ready records.

        The same pipeline as ``agon predict --bundle`` (:func:`agon_lightning.cascade.solve_batch`),
        which also offers the other drafter and k samples with a majority vote.
        """
        drafter, answerer = self.adapter_names[0], self.adapter_names[-1]
        return [r.to_dict() for r in solve_batch(self, batch, drafter, answerer)]

    # ------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Keep only the adapters: the base is frozen and reloads from model_name_or_path.
        keep = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in keep}
        checkpoint["agon"] = {"step": self.agon_step, "history": self.evaluator.history}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("agon", {})
        self.agon_step = int(state.get("step", 0))
        self.evaluator.history = list(state.get("history", []))


def _mean(values: Tensor) -> float:
    return float(values.float().mean()) if values.numel() else 0.0


def step_metrics(record: StepRecord) -> dict[str, float]:
    """The per-step game metrics (accuracy, reward, conversion and regression, lengths)."""
    d = record.draft
    metrics = {
        "train/drafter": float(d.adapter != "alpha"),
        "train/draft/reward": _mean(d.rewards),
        "train/draft/accuracy": _mean(d.correct),
        "train/draft/length": _mean(d.rollouts.lengths),
        "train/draft/truncation_rate": _mean(d.rollouts.truncated),
    }
    c = record.challenge
    if c is None:
        return metrics
    a, b = d.correct, c.correct
    wrong, right = (a == 0), (a == 1)
    metrics.update({
        "train/challenge/reward": _mean(c.rewards),
        "train/challenge/accuracy": _mean(b),
        "train/challenge/length": _mean(c.rollouts.lengths),
        "train/challenge/truncation_rate": _mean(c.rollouts.truncated),
        # P(challenger right | draft wrong) and P(challenger wrong | draft right); 0 when undefined.
        "train/conversion_rate": float((b[wrong] == 1).float().mean()) if wrong.any() else 0.0,
        "train/regression_rate": float((b[right] == 0).float().mean()) if right.any() else 0.0,
    })  # fmt: skip
    return metrics
