"""A game of LoRA policies on one frozen base as a LightningModule (Agon by default).

One training step reads top to bottom: the game plays (samples, verifies and pays every role:
:mod:`agon_lightning.games`), the game sets each role's advantages, and every role's adapter is
updated in one joint backward through one optimizer (:mod:`agon_lightning.training.optimize`).
The features (snapshots, the KL anchor, the league, sampling ahead) hook in around the play and
the update (:mod:`agon_lightning.training.features`); the module names none of them.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import lightning as L
import torch
from jsonargparse import lazy_instance
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

from agon_lightning.adapters.policy import (
    LoraOptions,
    adapter_parameters,
    attach_adapters,
    enable_checkpointing,
    load_base,
    logit_head,
)
from agon_lightning.data.base import reopen_stopped_epoch
from agon_lightning.game.prompts import Prompts
from agon_lightning.game.rewards import CompetitiveReward, Reward
from agon_lightning.game.types import Problem
from agon_lightning.games.agon import as_game
from agon_lightning.games.base import Game
from agon_lightning.games.records import StepRecord
from agon_lightning.rollout.base import Rollout
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.strategies import check_strategy
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.summarizers.basic import StripTraceSummarizer
from agon_lightning.training.checkpoint_state import adapter_state_keys, load_state, save_state
from agon_lightning.training.data_checks import check_problems
from agon_lightning.training.deployment import deployed_answers
from agon_lightning.training.features import Feature, KLAnchor, KLAnchors, League, build_features
from agon_lightning.training.optimize import optimize
from agon_lightning.training.options import GRPOOptions
from agon_lightning.training.player import Playing, check_paid
from agon_lightning.training.step_metrics import sparse_metrics, step_metrics
from agon_lightning.training.validation import CascadeEvaluator
from agon_lightning.verifiers.base import Verifier
from agon_lightning.verifiers.exact import ExactMatchVerifier

__all__ = ["DEFAULT_BASE", "AgonModule", "GRPOOptions"]

DEFAULT_BASE = "agon:tiny-qwen3"

#: The option types a module built in Python keeps in its checkpoint's hyper-parameters.
CHECKPOINT_GLOBALS = (LoraOptions, GRPOOptions, Prompts, KLAnchors, KLAnchor, League)


def allow_checkpoint_globals(*extra: type) -> None:
    """Let torch's default ``weights_only=True`` load the types a module's hyper-parameters hold.

    So ``trainer.fit(..., ckpt_path=...)`` in a script resumes as ``agon fit --ckpt_path`` does (the
    CLI's hyper-parameters are plain values). Idempotent. Called at import, when a module is built
    (with a game passed as an object: its class) and again in ``setup``, just before Lightning
    restores a checkpoint: a ``torch.serialization.safe_globals([...])`` block anywhere in the
    process removes the types it names when it exits, these included.
    """
    torch.serialization.add_safe_globals([*CHECKPOINT_GLOBALS, *extra])


allow_checkpoint_globals()


class AgonModule(Playing, L.LightningModule):
    """LoRA policies on one frozen base, trained by a game (Agon's two by default).

    Args:
        model_name_or_path: A Hub id, a local directory, or ``agon:NAME`` for a model shipped
            with the package.
        dtype: ``float32`` | ``bfloat16`` | ``float16`` for the base weights.
        game: The game (:mod:`agon_lightning.games`): a :class:`Game` (``AgonGame``, ``GRPOGame``, the
            shipped games, or one of your own), or ``agon`` (drafter + challenger) / ``grpo`` (one
            adapter, drafts only) with ``schedule`` and ``pairing`` below.
        schedule: With ``game: agon``: ``rotate`` | ``fixed`` | ``self_play`` (see
            :mod:`agon_lightning.games.schedule`).
        pairing: With ``game: agon``: which draft each challenge reads and is graded against:
            ``per_rollout`` (challenge i ↔ draft i) or ``shared`` (every challenge of a problem ↔
            its first draft; see :func:`agon_lightning.games.schedule.opponent_rows`).
        lora: Adapter settings.
        grpo: Policy-gradient settings.
        kl: Each role's KL anchor, by the game's role names (:mod:`agon_lightning.training.features.kl`):
            its reference (the base, its own adapter ``age`` updates ago, or its rival's adapter
            now) and its β; ``None``: ``grpo.kl_beta`` toward the base for every role.
        league: Past rivals (:mod:`agon_lightning.training.features.league`): at a share of steps a
            role faces a past version of its rival (Agon: the challenger answers a past drafter's
            drafts); ``None``: never.
        features: Features of your own (:class:`~agon_lightning.training.features.base.Feature`),
            after the built-in ones.
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
            (alpha drafts), ``cascade_aa`` for ``self_play``, the first policy for a game that
            does not deploy as a cascade.
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
        features: list[Feature] | None = None,
    ) -> None:
        super().__init__()
        self.game = as_game(game, schedule, pairing)
        """The game (public): its spec (policies, roles, rivals, deployment) and its step."""
        if max_grad_norm is not None and max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or null, got {max_grad_norm}")
        if max_consecutive_skips < 1:
            raise ValueError(f"max_consecutive_skips must be >= 1, got {max_consecutive_skips}")
        check_paid(verifier, reward)
        # a game object is kept in the hyper-parameters: its class loads too
        self._checkpoint_globals = () if isinstance(game, str) else (type(game),)
        allow_checkpoint_globals(*self._checkpoint_globals)
        self.features = build_features(self.game, kl, league, rollout, grpo, features)
        """The run's features (public), in hook order; each was checked against the game."""
        self.save_hyperparameters(
            ignore=["rollout", "verifier", "summarizer", "reward", "optimizer", "lr_scheduler", "features"]
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
        self._told_cut = False  # graded values met a reward paying only c: said once
        self.prompts = prompts
        """The prompt templates (public: callbacks build probe prompts with them)."""
        self.optimizer_factory = optimizer
        self.scheduler_factory = lr_scheduler
        self.max_grad_norm = max_grad_norm
        self.gradient_checkpointing = gradient_checkpointing
        self.validate_at_start = validate_at_start
        self.adapter_names = self.game.spec.policies
        """The adapters this run trains (public): the game's policies."""
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
            self.adapter_names, self.game.spec.deploy, moa=evaluate_moa, self_cascade=evaluate_self_cascade,
            deployed=deployed, game=self.game,
        )  # fmt: skip
        """The held-out evaluator (public): its ``history`` and ``last_outcomes`` feed the report callbacks."""

    # ------------------------------------------------------------------ set-up
    def configure_model(self) -> None:
        if self.policy is not None:
            return
        base, self.tokenizer = load_base(self.model_name_or_path, self.dtype_name)
        self.policy = attach_adapters(
            base, self.adapter_names, self.lora, self.features.slots(self.adapter_names)
        )
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
        allow_checkpoint_globals(*self._checkpoint_globals)  # before Lightning restores a checkpoint
        check_strategy(self.trainer.strategy)
        self.features.call("setup", self)
        check_problems(self, stage)
        # DeepSpeed clips inside its engine (Lightning's clip_gradients is a no-op there).
        config = getattr(getattr(self.trainer, "strategy", None), "config", None)
        if isinstance(config, dict) and self.max_grad_norm is not None:
            config.setdefault("gradient_clipping", self.max_grad_norm)

    def configure_optimizers(self) -> Any:
        self._bind_adapters()  # runs after the strategy has sharded the model
        groups = [{"params": self.adapter_params[n], "name": n} for n in self.adapter_names]
        optimizer = self.optimizer_factory(groups)
        if self.scheduler_factory is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.scheduler_factory(optimizer)}}

    # ------------------------------------------------------------------ the step
    def play(self, problems: list[Problem]) -> StepRecord:
        """Generate, verify and reward every role for one step (no gradients): the game's step, with the features'."""
        self.features.call("before_play", self)
        record = self.game.play(self, problems)
        self.features.call("after_play", self, record)
        return record

    def update(self, record: StepRecord) -> dict[str, float]:
        """μ optimizer steps on the step's rollouts (see :func:`~agon_lightning.training.optimize.optimize`).

        A backward whose loss or gradient is not finite reaches no adapter: the step is skipped
        (:func:`~agon_lightning.training.optimize.skip_step`). ``record.roles`` carry their advantages already.
        """
        self.features.call("before_update", self, record)
        stats, updated = optimize(self, record.roles)
        if updated:
            self.skips_in_a_row = 0
            self.policy_version += 1
        return stats

    @property
    def dropped_samples(self) -> int:
        """Drafts sampled ahead but dropped, too stale or for other problems (saved in checkpoints)."""
        return int(self.features.state_dict().get("dropped_samples", 0))

    def training_step(self, batch: list[Problem], batch_idx: int) -> None:
        t0 = time.perf_counter()
        record = self.play(batch)  # sample and score
        t1 = time.perf_counter()
        zero_std = self.game.advantages(record.roles, self.grpo.num_generations, self.grpo)
        with self.features.around_update(self, record) as around:
            stats = self.update(record)
        t2 = time.perf_counter()
        metrics = step_metrics(record, self.game.metrics(record))
        metrics.update({f"train/{k}": v for k, v in stats.items()})
        metrics["train/frac_zero_std_groups"] = float(zero_std.mean())
        metrics["train/skipped_steps"] = float(self.skipped_steps)
        metrics["time/generate_s"] = t1 - t0
        metrics["time/update_s"] = t2 - t1
        metrics.update(around)  # the features' (sampling ahead: how far behind this step's samples were)
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=len(batch), sync_dist=True)
        # What a step may leave undefined, from counts summed over every process, straight to the loggers at
        # this step: self.log would repeat the last value on later steps (see training.step_metrics).
        record.sparse_metrics = sparse_metrics(
            record, lambda t: self.trainer.strategy.reduce(t.to(self.device), reduce_op="sum"), self.game
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
        self.features.call("on_train_end", self)
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
        """The greedy deployed policy on each problem, as JSON-ready records: the same answers as the
        bundle's (:func:`~agon_lightning.training.deployment.deployed_answers`), fixed before training (``deployed``)."""
        return [r.to_dict() for r in deployed_answers(self, batch, self.evaluator.deployment, self.game)]

    # ------------------------------------------------------------------ checkpoints
    def adapter_state_keys(self, keys: Any) -> dict[str, list[str]]:
        """The state-dict keys among ``keys`` that hold each adapter's weights, by adapter name."""
        return adapter_state_keys(self.adapter_names, keys)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_state(self, checkpoint)
        reopen_stopped_epoch(checkpoint, self.trainer.num_training_batches)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        load_state(self, checkpoint)
