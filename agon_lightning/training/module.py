"""The Agon game as a LightningModule: two adapters, one base, roles that rotate.

One training step on P problems:

1. the *drafter* samples N rollouts per problem and is graded on correctness (GRPO);
2. the summarizer turns each draft a_i into what the challenger may read;
3. the *challenger* answers each problem once per draft, reading its summary, so its N
   answers b_i form a group too (``pairing: shared`` has all N read the problem's first draft
   instead), and is graded by the reward component (correctness + conversion bonus +
   optional length tiebreak + format);
4. both adapters are updated in one joint backward through one optimizer (one parameter
   group per adapter), so every trainable parameter takes part in every backward (DDP
   needs no unused-parameter search, DeepSpeed gets the single optimizer it accepts).

``game="grpo"`` plays only step 1 with one adapter: the vanilla baseline on the same code.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Literal

import lightning as L
import torch
from jsonargparse import lazy_instance
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_warn

from agon_lightning.adapters.policy import (
    LoraOptions,
    adapter_parameters,
    attach_adapters,
    enable_checkpointing,
    generating,
    load_base,
    logit_head,
    resolve_model_path,
    sample_with,
)
from agon_lightning.adapters.snapshots import AdapterHistory, check_adapter_state
from agon_lightning.data.base import ProblemDataModule
from agon_lightning.game.prompts import Prompts
from agon_lightning.game.rewards import CompetitiveReward, Reward, RoleOutcome, cut_value
from agon_lightning.game.types import Problem
from agon_lightning.rollout.base import Rollout, RolloutBatch
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.pipeline import solve_batch
from agon_lightning.rollout.prefetch import DraftSource
from agon_lightning.strategies import check_snapshot_strategy, check_strategy, gathered
from agon_lightning.strategies.gather import of_adapter
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.summarizers.basic import StripTraceSummarizer
from agon_lightning.training.anchor import KLAnchors, RoleAnchors
from agon_lightning.training.games import Game, as_game
from agon_lightning.training.grpo import LossNormalizer
from agon_lightning.training.league import League, LeaguePlay, load_past
from agon_lightning.training.options import GRPOOptions
from agon_lightning.training.records import RoleRollout, StepRecord
from agon_lightning.training.resume_check import check_saved_shapes
from agon_lightning.training.step_metrics import (
    exchange_counts,
    exchange_rates,
    function_metrics,
    sparse_metrics,
    step_metrics,
)
from agon_lightning.training.update import (
    loss_mask,
    nonfinite_roles,
    role_loss,
    sampling_logprobs,
    set_advantages,
)
from agon_lightning.training.validation import CascadeEvaluator
from agon_lightning.verifiers.base import Verifier
from agon_lightning.verifiers.exact import ExactMatchVerifier

# Importable from here as before they moved.
__all__ = ["AgonModule", "GRPOOptions", "RoleRollout", "StepRecord", "check_adapter_state", "step_metrics",
           "exchange_counts", "exchange_rates", "function_metrics"]  # fmt: skip

DEFAULT_BASE = "agon:tiny-qwen3"


class AgonModule(L.LightningModule):
    """Two LoRA policies on one frozen base, trained by the Agon game.

    Args:
        model_name_or_path: A Hub id, a local directory, or ``agon:NAME`` for a model shipped
            with the package.
        dtype: ``float32`` | ``bfloat16`` | ``float16`` for the base weights.
        game: The game (:mod:`agon_lightning.training.games`): a :class:`Game` (``AgonGame``,
            ``GRPOGame``, or one of your own), or ``agon`` (drafter + challenger) / ``grpo``
            (one adapter, drafts only) with ``schedule`` and ``pairing`` below.
        schedule: With ``game: agon``: ``rotate`` | ``fixed`` | ``self_play`` (see
            :mod:`agon_lightning.training.schedule`).
        pairing: With ``game: agon``: which draft each challenge reads and is graded against:
            ``per_rollout`` (challenge i ↔ draft i) or ``shared`` (every challenge of a problem ↔
            its first draft; see :func:`agon_lightning.training.schedule.opponent_rows`).
        lora: Adapter settings.
        grpo: Policy-gradient settings.
        kl: Each role's KL anchor (:mod:`agon_lightning.training.anchor`): its reference (the
            base, its own adapter ``age`` updates ago, or the rival's adapter now) and its β;
            ``None``: ``grpo.kl_beta`` toward the base for both roles.
        league: Past rivals (:mod:`agon_lightning.training.league`): at a share of steps the
            challenger answers the drafts of a past drafter; ``None``: never.
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
        max_consecutive_skips: A step whose loss or gradient is not finite is skipped (nothing
            reaches the adapters) and counted in ``train/skipped_steps``; this many skipped
            steps in a row stop training with an error.
        evaluate_moa: Also evaluate ``moa``: the untrained base drafting and answering after
            reading its own summary (the Mixture-of-Agents reference).
        evaluate_self_cascade: With one adapter, also evaluate ``cascade_aa``: it drafts, then
            answers after reading its own draft's summary (GRPO's two-pass self-cascade).
        deployed: The evaluator key reported as ``val/deployed/*`` (and monitored by the
            checkpoint), fixed before training; ``None``: ``cascade_ab`` for two adapters
            (alpha drafts), ``cascade_aa`` for ``self_play``, ``alpha`` for GRPO.
    """

    def __init__(
        self,
        model_name_or_path: str = DEFAULT_BASE,
        dtype: str = "float32",
        game: Game | Literal["agon", "grpo"] = "agon",
        schedule: Literal["rotate", "fixed", "self_play"] = "rotate",
        pairing: Literal["per_rollout", "shared"] = "per_rollout",
        lora: LoraOptions = LoraOptions(),
        grpo: GRPOOptions = GRPOOptions(),
        kl: KLAnchors | None = None,
        league: League | None = None,
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
        evaluate_self_cascade: bool = False,
        deployed: str | None = None,
        max_consecutive_skips: int = 3,
    ) -> None:
        super().__init__()
        self.game = as_game(game, schedule, pairing)
        """The game (public): its roles, what each reads, whom each faces, what each is paid."""
        if max_grad_norm is not None and max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or null, got {max_grad_norm}")
        if max_consecutive_skips < 1:
            raise ValueError(f"max_consecutive_skips must be >= 1, got {max_consecutive_skips}")
        if getattr(verifier, "graded", False) and not getattr(reward, "pays_graded", False):
            raise ValueError(
                f"the verifier ({type(verifier).__name__}) grades with several reward functions or weights, "
                f"but the reward ({type(reward).__name__}) pays only their 0/1 correctness; pay the weighted "
                "sum with --model.reward=graded (GradedReward), or give one function with weight 1"
            )
        self.anchors = RoleAnchors(kl, grpo.kl_beta, self.game.kind, getattr(self.game, "schedule", "rotate"))
        """Each role's KL anchor at work (public): its reference at each step."""
        self.league = LeaguePlay(league, self.game.kind)
        """The league of past rivals at work (public; it never plays at ``probability`` 0)."""
        depth = max(self.anchors.depth, self.league.depth)
        self.adapter_history = AdapterHistory(depth) if depth else None
        """Each adapter's last versions (public): what the ``self`` references and the league read."""
        self.drafts = DraftSource(rollout, corrected=grpo.tis_cap is not None)
        """Where each step's drafts come from (public): sampled in the step, or ahead of it."""
        self.save_hyperparameters(
            ignore=["rollout", "verifier", "summarizer", "reward", "optimizer", "lr_scheduler"]
        )
        self.automatic_optimization = False
        self.strict_loading = False  # checkpoints hold the adapters only, not the frozen base
        self.model_name_or_path = model_name_or_path
        self.dtype_name = dtype
        self.lora = lora
        self.grpo = grpo
        self.rollout = rollout
        """The sampling backend (public: callbacks read ``max_new_tokens``; see ``callbacks/protocol.py``)."""
        self.verifier = verifier
        self.summarizer = summarizer
        self.reward = reward
        self._told_cut = False  # graded values met a reward paying only c: said once (tell_if_cut)
        self.prompts = prompts
        """The prompt templates (public: callbacks build probe prompts with them)."""
        self.optimizer_factory = optimizer
        self.scheduler_factory = lr_scheduler
        self.max_grad_norm = max_grad_norm
        self.gradient_checkpointing = gradient_checkpointing
        self.validate_at_start = validate_at_start
        self.adapter_names = self.game.adapters
        """The adapters this run trains (public), spelled as in :mod:`agon_lightning.game.names`."""
        self.agon_step = 0
        """Game steps taken (public); drives the role schedule, saved in checkpoints."""
        self.max_consecutive_skips = max_consecutive_skips
        self.skipped_steps = 0  # steps dropped for a non-finite loss or gradient (saved in checkpoints)
        self.skips_in_a_row = 0
        self.policy_version = 0
        """Updates the adapters have taken (public; saved in checkpoints): the version samples record."""
        self.policy: Any = None
        """The PEFT model holding the base and every adapter (public); built in ``configure_model``."""
        self.tokenizer: Any = None
        """The base model's tokenizer (public); loaded with the policy."""
        self.last_record: StepRecord | None = None
        """What the last training step played (public; the callbacks' source); ``None`` before one."""
        self.evaluator = CascadeEvaluator(
            self.adapter_names,
            self.game.kind,
            moa=evaluate_moa,
            self_cascade=evaluate_self_cascade,
            deployed=deployed,
        )
        """The held-out evaluator (public): its ``history`` and ``last_outcomes`` feed the report callbacks."""

    # ------------------------------------------------------------------ set-up
    def configure_model(self) -> None:
        if self.policy is not None:
            return
        base, self.tokenizer = load_base(self.model_name_or_path, self.dtype_name)
        slots = {**self.anchors.slots(self.adapter_names), **self.league.slots(self.adapter_names)}
        self.policy = attach_adapters(base, self.adapter_names, self.lora, slots)
        if self.gradient_checkpointing:
            enable_checkpointing(self.policy)
        self._bind_adapters()
        for p in self.trainable:
            p.requires_grad_(True)
        self.logit_head = logit_head(self.policy)  # refuses a model whose logits it cannot reproduce

    def _bind_adapters(self) -> None:
        """What trains, is saved and is restored: each adapter's parameters, found by adapter name.

        Decided by name — never read back from requires_grad, which PEFT toggles whenever the
        active adapter changes — once the adapters are attached and again once a strategy has
        sharded the model (FSDP2 puts new parameter objects in place).
        """
        self.adapter_params = {name: adapter_parameters(self.policy, name) for name in self.adapter_names}
        """Each adapter's parameters, by name (public)."""
        self.trainable = [p for name in self.adapter_names for p in self.adapter_params[name]]
        """Every adapter parameter: what trains (public)."""

    def setup(self, stage: str) -> None:
        check_strategy(self.trainer.strategy)
        if self.adapter_history is not None:
            check_snapshot_strategy(self.trainer.strategy)
        self._check_problems(stage)
        # DeepSpeed clips inside its engine (Lightning's clip_gradients is a no-op there).
        config = getattr(getattr(self.trainer, "strategy", None), "config", None)
        if isinstance(config, dict) and self.max_grad_norm is not None:
            config.setdefault("gradient_clipping", self.max_grad_norm)

    def _check_problems(self, stage: str) -> None:
        """The start-time checks on the data to be read, before the model loads: prompts that leave no room
        for the completion (dropped or refused, ``data.too_long``), then the verifier's (a reward function's
        column missing, say)."""
        data = getattr(self.trainer, "datamodule", None)
        if not isinstance(data, ProblemDataModule):
            return
        data.fit_prompts(
            stage, resolve_model_path(self.model_name_or_path), self.prompts.draft_prompt, self.rollout.max_new_tokens,
            getattr(self.rollout, "max_model_len", None),
        )  # fmt: skip
        if stage == "fit":
            self.verifier.check_problems(data.train_problems, "the training problems")
        if stage in ("fit", "validate", "test"):
            self.verifier.check_problems(data.val_problems, "the held-out problems")

    def configure_optimizers(self) -> Any:
        self._bind_adapters()  # runs after the strategy has sharded the model
        groups = [{"params": self.adapter_params[n], "name": n} for n in self.adapter_names]
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
            self.policy, self.rollout, self.tokenizer, adapter, prompts, num_samples, greedy, self.trainable,
            self._sampling_weights,
        )  # fmt: skip

    def sample_mixed(
        self, adapters: list[str | None], prompts: list[str], greedy: bool = False
    ) -> RolloutBatch:
        """One sample per prompt, prompt ``i`` with ``adapters[i]`` (``None`` = the base), in one batch."""
        with generating(self.policy), self._sampling_weights():
            return self.rollout.generate(
                self.policy, self.tokenizer, prompts, 1, greedy, adapter_names=adapters
            )

    def _sampling_weights(self) -> Any:
        """Around one rollout: the whole model gathered once under sharding, unless the backend keeps its own.

        A backend with its own copy of the base (vLLM) reads only the adapters, whole
        (:func:`~agon_lightning.strategies.full_tensors`).
        """
        if self.rollout.keeps_own_weights:
            return contextlib.nullcontext()
        return gathered(self.policy)

    def tell_if_cut(self, outcome: RoleOutcome | None) -> None:
        """Warn once when the reward functions' graded values meet a reward that pays only c: never a silent cut.

        (Several functions or weights are refused at construction; one function's values are seen here.)
        """
        paid = getattr(self.reward, "pays_graded", False)  # a reward component typed by duck has no such flag
        value = None if outcome is None or self._told_cut or paid else cut_value(outcome)
        if value is None:
            return
        self._told_cut = True
        rule = getattr(self.verifier, "correct_if", None)
        threshold = getattr(self.verifier, "threshold", None)
        rule = f" (c = {rule} >= {threshold:g})" if rule and threshold is not None else ""
        rank_zero_warn(
            f"the reward functions returned {value:g}, not 0 or 1, but the reward ({type(self.reward).__name__}) "
            f"pays only the 0/1 correctness c{rule}; pay their values with --model.reward=graded (GradedReward), "
            "or return 0 or 1 from the function"
        )

    def play(self, problems: list[Problem]) -> StepRecord:
        """Generate, verify and reward every role for one step (no gradients): the game's step."""
        return self.game.play(self, problems)

    def _next_drafts(self, problems: list[Problem]) -> tuple[int, str, Any]:
        """The next step, its drafter, and the call sampling its drafts with the adapters the backend holds now."""
        step = self.agon_step + 1
        drafter, _ = self.game.roles(step)
        prompts = [self.prompts.draft_prompt(self.tokenizer, p) for p in problems]
        n = self.grpo.num_generations
        return (
            step,
            drafter,
            lambda: self.rollout.generate_ahead(
                self.policy, self.tokenizer, prompts, n, [drafter] * len(prompts)
            ),
        )

    @property
    def dropped_samples(self) -> int:
        """Drafts sampled ahead but dropped, too stale or for other problems (saved in checkpoints)."""
        return self.drafts.dropped

    # ------------------------------------------------------------------ update
    def update(self, roles: list[RoleRollout]) -> dict[str, float]:
        """μ optimizer steps on the step's rollouts; each micro-batch is one joint backward of both roles.

        A backward whose loss or gradient is not finite reaches no adapter: the step is skipped
        (see :meth:`_skip`).
        """
        opt = self.optimizers()
        total = len(roles[0].rollouts)
        mb = self.grpo.micro_batch_size or total
        norms = [
            LossNormalizer(
                len(r.rollouts), int(loss_mask(r.rollouts, self.grpo.mask_truncated).sum()),
                self.rollout.max_new_tokens,
            )
            for r in roles
        ]  # fmt: skip
        references = self.anchors.references(self.policy, roles, self.policy_version, self.adapter_history)
        if self.grpo.num_iterations > 1:  # the sampling policy's log-probs, before any update
            sampling_logprobs(self, roles, mb)  # in micro-batches too: micro_batch_size bounds every forward
        stats_sum: dict[str, float] = {}
        for _ in range(self.grpo.num_iterations):
            opt.zero_grad(set_to_none=True)
            finite = [True] * len(roles)
            for start in range(0, total, mb):
                rows = slice(start, start + mb)
                loss = torch.zeros((), device=self.device)
                for i, (r, norm) in enumerate(zip(roles, norms)):
                    loss_i, stats = role_loss(self, r, rows, norm, references[i])
                    loss = loss + loss_i
                    value = float(loss_i.detach())
                    finite[i] = finite[i] and math.isfinite(value)
                    share = min(mb, total - start) / total / len(roles) / self.grpo.num_iterations
                    for k, v in stats.items():
                        stats_sum[k] = stats_sum.get(k, 0.0) + float(v) * share
                    stats_sum["loss"] = stats_sum.get("loss", 0.0) + value / self.grpo.num_iterations
                # Always backward, even on a NaN: under DDP every rank must join each all-reduce.
                self.manual_backward(loss)
            bad = nonfinite_roles(self, roles, finite)
            if self.trainer.strategy.reduce_boolean_decision(bool(bad), all=False):
                opt.zero_grad(set_to_none=True)
                self._skip(bad or ["another process's"])
                return stats_sum
            if self.max_grad_norm is not None:
                self.clip_gradients(opt, gradient_clip_val=self.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()
            self.drafts.weights_updated(self.policy, list(dict.fromkeys(r.adapter for r in roles)))
            scheduler = self.lr_schedulers()
            if scheduler is not None:
                scheduler.step()
        self.skips_in_a_row = 0
        self.policy_version += 1
        return stats_sum

    def _skip(self, bad: list[str]) -> None:
        """Drop this step's update; stop after ``max_consecutive_skips`` in a row."""
        self.skipped_steps += 1
        self.skips_in_a_row += 1
        message = (
            f"step {self.agon_step}: non-finite loss or gradient in the {', '.join(bad)}; the update was "
            f"skipped ({self.skips_in_a_row} in a row, {self.skipped_steps} in all)"
        )
        if self.skips_in_a_row >= self.max_consecutive_skips:
            raise FloatingPointError(
                f"{message}. Training stopped after {self.skips_in_a_row} skipped steps in a row "
                f"(model.max_consecutive_skips={self.max_consecutive_skips}). The adapters, and every "
                "checkpoint written, hold the last good step. Lower the learning rate, check the rewards the "
                "verifier and reward component return, or resume from the last checkpoint."
            )
        rank_zero_warn(message)

    def training_step(self, batch: list[Problem], batch_idx: int) -> None:
        t0 = time.perf_counter()
        record = self.play(batch)
        t1 = time.perf_counter()
        roles = record.roles
        zero_std = set_advantages(roles, self.grpo)
        with self.drafts.around_update(
            self.trainer, self.policy, [r.versions for r in roles], self.policy_version, self._next_drafts,
            self.grpo.num_iterations,
        ) as ahead:  # fmt: skip
            stats = self.update(roles)
        t2 = time.perf_counter()
        metrics = step_metrics(record)
        metrics.update({f"train/{k}": v for k, v in stats.items()})
        metrics["train/frac_zero_std_groups"] = float(zero_std.mean())
        metrics["train/skipped_steps"] = float(self.skipped_steps)
        metrics["time/generate_s"] = t1 - t0
        metrics["time/update_s"] = t2 - t1
        metrics.update(ahead)  # sampling ahead: how far behind this step's samples were, what it cost
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=len(batch), sync_dist=True)
        # What a step may leave undefined, from counts summed over every process, straight to the loggers at
        # this step: self.log would repeat the last value on later steps (see training.step_metrics).
        record.sparse_metrics = sparse_metrics(
            record, lambda t: self.trainer.strategy.reduce(t.to(self.device), reduce_op="sum")
        )
        if record.sparse_metrics and (record.step + 1) % self.trainer.log_every_n_steps == 0:
            for logger in self.loggers:
                logger.log_metrics(record.sparse_metrics, step=record.step)
        self.last_record = record
        self.agon_step += 1

    # ------------------------------------------------------------------ validation
    def _evaluate_outside_loop(self) -> None:
        """Evaluate where Lightning's validation loop does not run (before and after fit)."""
        datamodule = self.trainer.datamodule
        if datamodule is None or self.trainer.limit_val_batches == 0:
            return
        metrics = self.evaluator.run(self, datamodule.val_dataloader())
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.global_step)
        self.evaluator.history.append((self.global_step, metrics))

    def on_train_start(self) -> None:
        if self.validate_at_start and self.agon_step == 0:
            self._evaluate_outside_loop()

    def on_train_end(self) -> None:
        self.drafts.discard()  # drafts sampled for a step that did not come (the run stopped early)
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
        """The greedy deployed cascade on each problem, as JSON-ready records.

        The deployed policy is the one fixed before training (``deployed``; by default alpha drafts and
        beta answers); a single deployed adapter drafts and the other one answers, as in its bundle.

        The same pipeline as ``agon predict --bundle`` (:func:`agon_lightning.rollout.pipeline.solve_batch`),
        which also offers the other drafter and k samples with a majority vote.
        """
        drafter, answerer = self.evaluator.deployed_drafter, self.evaluator.deployed_answerer
        return [r.to_dict() for r in solve_batch(self, batch, drafter, answerer)]

    # ------------------------------------------------------------------ checkpoints
    def adapter_state_keys(self, keys: Any) -> dict[str, list[str]]:
        """The state-dict keys among ``keys`` that hold each adapter's weights, by adapter name."""
        return {name: [k for k in keys if of_adapter(k, name)] for name in self.adapter_names}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Keep only the adapters, chosen by name: the base is frozen and reloads from model_name_or_path.
        state = checkpoint["state_dict"]
        by_adapter = self.adapter_state_keys(state)
        empty = [name for name, keys in by_adapter.items() if not keys]
        # Under a one-file format of a sharded strategy only rank 0 holds the tensors it writes.
        if empty and (state or self.global_rank == 0):
            raise RuntimeError(f"refusing to write a checkpoint without adapter(s) {empty}: no tensors found")
        checkpoint["state_dict"] = {k: state[k] for keys in by_adapter.values() for k in keys}
        checkpoint["agon"] = {
            "step": self.agon_step,
            "history": self.evaluator.history,
            "adapters": {name: len(keys) for name, keys in by_adapter.items()},
            "skipped_steps": self.skipped_steps,
            "skips_in_a_row": self.skips_in_a_row,
            # Drafts sampled ahead are not saved: a resumed run samples its first step again.
            "policy_version": self.policy_version,
            "dropped_samples": self.dropped_samples,
            # the adapters' past weights ('self' KL references, the league) and the league's record
            "adapter_history": self.adapter_history.state_dict() if self.adapter_history else None,
            "league": self.league.state_dict(),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("agon", {})
        # Once configure_model has run, the adapters the checkpoint must hold are known. (DeepSpeed
        # keeps module weights in its own files: there is no "state_dict" here to check.)
        if self.policy is not None and "state_dict" in checkpoint:
            shapes = {n: tuple(p.shape) for n, p in self.named_parameters()}
            check_adapter_state(self.adapter_state_keys(list(shapes)), checkpoint["state_dict"], state)
            # another lora.r (or base) names the option, not a hundred torch "size mismatch" lines
            check_saved_shapes(
                shapes, checkpoint["state_dict"], checkpoint.get("hyper_parameters"), self.hparams
            )
        self.agon_step = int(state.get("step", 0))
        self.evaluator.history = list(state.get("history", []))
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.skips_in_a_row = int(state.get("skips_in_a_row", 0))
        self.policy_version = int(state.get("policy_version", self.agon_step - self.skipped_steps))
        self.drafts.dropped = int(state.get("dropped_samples", 0))
        load_past(self.adapter_history, self.league, state)
