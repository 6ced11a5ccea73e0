"""Checkpoints that resume exactly, and adapter bundles ready to deploy.

Every save writes two things next to each other, each atomically (written under a temporary
sibling name, then renamed into place), so a kill in the middle of a save leaves the
previous checkpoint as it was:

* ``NAME.ckpt``, the full resume state: both adapters (not the frozen base, which reloads
  from ``model_name_or_path``), optimizer and scheduler, Lightning's loop and step counters,
  the role-schedule position (``AgonModule.agon_step``), the training loader's position in
  its epoch (:class:`~agon_lightning.data.base.ResumableDataLoader`) and every process's
  torch, CUDA, numpy and Python RNG states;
* ``NAME/``, the adapter bundle: ``alpha/`` and ``beta/`` in PEFT's layout plus ``agon.json``
  (:func:`agon_lightning.deploy.bundle.save_bundle`), written by the composed
  :class:`~callbacks.bundle.BundleWriter`.

Each checkpoint gets its SHA-256 beside it (``NAME.ckpt.sha256``, kept in step with the file as
:mod:`agon_lightning.infra.checksum` describes), and a resume checks it: a truncated or altered
checkpoint is refused by name, with the newest intact one offered instead.

A fit owns its checkpoint directory (:mod:`~agon_lightning.callbacks.run_lock`): a second fit
into it while the first lives is refused, and so is a fit from scratch into a directory that
holds an earlier run's checkpoints, unless it resumes or passes ``overwrite``
(:mod:`~agon_lightning.callbacks.checkpoint_dir`).

``last`` is rewritten every ``every_n_train_steps``; ``best-step=S`` follows ``monitor`` and
is updated after validation. ``agon fit --ckpt_path last`` resumes (the CLI finds ``last``
through :meth:`AgonCheckpoint.last_checkpoint`; from Python, pass that path as ``ckpt_path``),
and ``ckpt_path="best"`` picks the best. The directory defaults to
``<default_root_dir>/checkpoints`` rather than the logger's versioned folder, so a restarted
process finds ``last`` again.

Why a callback of our own rather than a ``ModelCheckpoint`` subclass: the two triggers, the
atomic write and the bundle beside each checkpoint are exactly the parts ``ModelCheckpoint``
keeps in private methods (``_save_checkpoint``, ``_save_topk_checkpoint``, ...), so a
subclass had to override and call them, and any Lightning release may change them. What is
needed fits in this module on Lightning's public API: the ``Checkpoint`` base class (so
``trainer.checkpoint_callbacks`` and ``ckpt_path="best"`` see it), its public hooks,
``trainer.save_checkpoint`` and ``trainer.strategy.remove_checkpoint``. The saved callback
state keeps ``ModelCheckpoint``'s key and fields, so checkpoints written before still resume
with their best-checkpoint record.

RNG states are put back right before the first batch after resuming, not when the
checkpoint is loaded: set-up (building the adapters, starting data iterators) draws from the
global generators, and in a resumed run it does so at other points than in a run that
never stopped.

An interrupt (Ctrl-C, SIGTERM) during training finishes the step in flight and the
validation that follows it, if one is due, writes ``last`` and exits with status 128 + the
signal number (:mod:`agon_lightning.callbacks.interrupt`), so no work since the last periodic
save is lost and ``--ckpt_path last`` continues exactly.
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
from pathlib import Path
from typing import Any, Literal
from weakref import proxy

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from agon_lightning.deploy.bundle import atomic_directory
from agon_lightning.infra.checksum import (
    PARTIAL_SUFFIX,
    publish_with_digest,
    remove_digests,
    verify_checkpoint,
)

from .bundle import DRAFTER_MODES, BundleWriter, bundle_dir  # noqa: F401  DRAFTER_MODES, bundle_dir: this module's API too
from .checkpoint_dir import clean_leftovers, clear_checkpoints, earlier_checkpoints, fresh_fit_refusal
from .interrupt import Interrupted, StopSignals
from .run_lock import DirectoryRefused, RunLock
from .verified_io import verify_loads

RNG_KEY = "rng_states"


def collect_rng_states() -> dict[str, Any]:
    """The global RNG states (torch, CUDA, numpy, Python) as checkpoint-safe values."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`collect_rng_states` returned."""
    torch.set_rng_state(states["torch"])
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = states["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def publish(partial: str | Path, target: str | Path) -> None:
    """Move a finished checkpoint onto ``target`` in one rename.

    A file is renamed directly; a directory (sharded strategies write one) is swapped in
    through :func:`~agon_lightning.deploy.bundle.atomic_directory`.
    """
    partial, target = Path(partial), Path(target)
    if partial.is_dir():
        atomic_directory(target, lambda staging: os.replace(partial, staging))  # onto the empty staging dir
    else:
        os.replace(partial, target)


def checkpoint_name(pattern: str, metrics: dict[str, Any]) -> str:
    """``pattern`` with each ``{name}`` or ``{name:fmt}`` written as ``name=value`` (``ModelCheckpoint``'s names).

    A metric the pattern names but ``metrics`` lacks is written as 0, as Lightning does.
    """

    def value(match: re.Match[str]) -> str:
        name, fmt = match.group(1), match.group(2) or ""
        found = metrics.get(name, 0)
        found = found.item() if isinstance(found, torch.Tensor) else found
        return f"{name}={format(found, fmt)}"

    return re.sub(r"\{([^{}:]+)(?::([^{}]*))?\}", value, pattern)


class AgonCheckpoint(Checkpoint):
    """``last`` every k steps and ``best`` by a validation metric; resume state plus adapter bundle.

    Args:
        dirpath: Checkpoint directory (default ``<trainer.default_root_dir>/checkpoints``).
        filename: Name pattern of the best checkpoints (``{step}`` becomes ``step=S``, as in
            Lightning's ``ModelCheckpoint``).
        monitor: Validation metric that picks the best checkpoint; ``None`` keeps the
            ``save_top_k`` most recent periodic checkpoints instead.
        mode: ``max`` or ``min`` for ``monitor``.
        every_n_train_steps: Write ``last`` every this many optimizer steps (one per game
            step unless ``grpo.num_iterations`` > 1).
        save_top_k: Best checkpoints kept (``-1`` all, ``0`` none).
        save_last: Write ``last``; needed by ``--ckpt_path last``.
        bundles: Also write each checkpoint's adapters as a PEFT bundle beside it.
        drafter: Adapter that drafts in the bundle's deployed cascade. ``deployed``: the drafter
            of the module's deployed policy (``model.deployed``), fixed before training;
            ``auto`` picks, post hoc, the cascade order that scored higher at the last
            validation (the first adapter on a tie), as the paper chose its direction; or the
            name of one of the run's adapters (any game's: ``alpha``, ``verifier``, ...), checked
            when the fit starts.
        save_on_interrupt: On SIGINT or SIGTERM during training, finish the step, write
            ``last`` and exit (status 128 + signal number) instead of dying mid-step.
        stop_timeout_s: A process still running this long after such a signal (blocked in a
            collective whose peer died, or a step longer than that) prints its stacks and exits
            without saving; ``None``: wait for the step however long it takes.
        verbose: Log each save.
        overwrite: Let a fit from scratch start in a directory holding an earlier run's
            checkpoints, deleting them (and their bundles) first; without it such a fit is
            refused. A fit that resumes (``ckpt_path``) never needs it.

    Attributes:
        best_model_path: The best checkpoint so far (``""`` before one).
        best_model_score: Its ``monitor`` value.
        best_k_models: ``{path: score}`` of the kept best checkpoints.
        last_model_path: The last ``last`` written.
        last_saved_step: The global step of the latest save (``-1`` before one).
    """

    LAST_NAME = "last"
    FILE_EXTENSION = ".ckpt"

    def __init__(
        self,
        dirpath: str | None = None,
        filename: str = "best-{step}",
        monitor: str | None = "val/deployed/pass@1",
        mode: Literal["max", "min"] = "max",
        every_n_train_steps: int = 10,
        save_top_k: int = 1,
        save_last: bool = True,
        bundles: bool = True,
        drafter: str = "deployed",
        save_on_interrupt: bool = True,
        stop_timeout_s: float | None = 120.0,
        verbose: bool = False,
        overwrite: bool = False,
    ) -> None:
        if every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be >= 1, got {every_n_train_steps}")
        if stop_timeout_s is not None and stop_timeout_s <= 0:
            raise ValueError(f"stop_timeout_s must be > 0 or null, got {stop_timeout_s}")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        if save_top_k < -1:
            raise ValueError(f"save_top_k must be >= -1, got {save_top_k}")
        self.dirpath = os.path.realpath(os.path.expanduser(dirpath)) if dirpath else None
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.every_n_train_steps = every_n_train_steps
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.bundles = bundles
        self.bundle_writer = BundleWriter(drafter)  # checks ``drafter``
        self.save_on_interrupt = save_on_interrupt
        self.stop_timeout_s = stop_timeout_s
        self.verbose = verbose
        self.overwrite = overwrite
        self.save_weights_only = False
        self.best_model_path = ""
        self.best_model_score: torch.Tensor | None = None
        self.best_k_models: dict[str, torch.Tensor] = {}
        self.last_model_path = ""
        self.last_saved_step = -1
        self._last_step = -1  # the global step ``last`` was written at (-1: not yet, in this process)
        self._rng_to_restore: dict[str, Any] | None = None
        self._signals = StopSignals()
        self._stop_pending = False
        self._lock = RunLock()
        self._verified: str | None = None  # the checkpoint verify_resume checked last

    @property
    def state_key(self) -> str:
        # ModelCheckpoint's key for the same triggers: checkpoints written before resume their record.
        triggers = {
            "monitor": self.monitor, "mode": self.mode, "every_n_train_steps": self.every_n_train_steps,
            "every_n_epochs": 0, "train_time_interval": None,
        }  # fmt: skip
        return f"{type(self).__qualname__}{triggers!r}"

    # ------------------------------------------------------------------ where
    def directory(self, trainer: L.Trainer) -> str:
        """The checkpoint directory: ``dirpath``, else ``<trainer.default_root_dir>/checkpoints``."""
        return self.dirpath or os.path.join(trainer.default_root_dir, "checkpoints")

    def last_checkpoint(self, trainer: L.Trainer) -> str | None:
        """The ``last`` checkpoint a run with this trainer writes, if it exists (what ``--ckpt_path last`` resumes)."""
        path = os.path.join(self.directory(trainer), self.LAST_NAME + self.FILE_EXTENSION)
        return path if os.path.exists(path) else None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.dirpath = trainer.strategy.broadcast(self.directory(trainer))
        verify_loads(trainer.strategy, self.verify_resume)  # a checkpoint is checked before torch reads it
        if stage != "fit":
            return
        if self.bundles:
            self.bundle_writer.check(pl_module)  # before the lock: a refused fit leaves nothing behind
        # Global rank zero takes the lock; every rank learns the outcome from one broadcast.
        refusal = None
        if trainer.is_global_zero:
            try:
                for line in filter(None, [self._lock.acquire(self.dirpath), *clean_leftovers(self.dirpath)]):
                    rank_zero_info(line)
            except DirectoryRefused as err:
                refusal = str(err)
        refusal = trainer.strategy.broadcast(refusal)
        if refusal is not None:
            raise DirectoryRefused(refusal)

    def _claim_directory(self, trainer: L.Trainer) -> None:
        """Refuse a fit from scratch over an earlier run's checkpoints, or delete them with ``overwrite``.

        At the start of training, the first point where Lightning has said whether it resumed
        (``trainer.ckpt_path``); every rank calls it (one broadcast).
        """
        refusal = None
        fresh = not (trainer.ckpt_path or trainer.fast_dev_run)  # a fast dev run writes no checkpoint
        if trainer.is_global_zero and fresh and (found := earlier_checkpoints(self.dirpath)):
            if self.overwrite:
                rank_zero_info(clear_checkpoints(found))
            else:
                refusal = fresh_fit_refusal(self.dirpath, found)
        refusal = trainer.strategy.broadcast(refusal)
        if refusal is not None:
            raise DirectoryRefused(refusal)

    def verify_resume(self, path: str) -> None:
        """Check a checkpoint about to be loaded against its digest; logs a note for one without.

        Raises:
            DamagedCheckpoint: it is truncated or altered (the message names the newest intact one).
        """
        if self._verified == path:
            return
        note = verify_checkpoint(path)
        if note:
            rank_zero_info(note)
        self._verified = path

    # ------------------------------------------------------------------ when
    def _skips(self, trainer: L.Trainer, any_save: bool = True) -> bool:
        """No save outside fitting, in a sanity check or a fast dev run, or twice for one step
        (``any_save``: after any save at this step, best included)."""
        return bool(
            trainer.fast_dev_run
            or trainer.state.fn != "fit"
            or trainer.sanity_checking
            or (any_save and self.last_saved_step == trainer.global_step)
        )

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not (trainer.global_step % self.every_n_train_steps or self._skips(trainer)):
            if self.monitor is None:
                self._save_recent(trainer)
            self._save_last(trainer)
        if self._interrupt_requested(trainer):
            # Saved now; the stop waits for the validation due after this batch, if any
            # (resuming skips it), or else happens as the next batch starts.
            self._save_last_if_behind(trainer)
            self._stop_pending = True

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != "fit" or trainer.sanity_checking or trainer.fast_dev_run:
            return
        # ``last`` written just before this validation is rewritten after it. Lightning skips,
        # on resume, a validation that was due right after the checkpointed batch, so the
        # saved state has to include it (its metrics, the best score, the evaluator history).
        refresh_last = self.save_last and self.last_saved_step == trainer.global_step
        if self.monitor is not None:
            self._save_best(trainer)
        if refresh_last:
            self._save_last(trainer)
        if self._stop_pending or self._interrupt_requested(trainer):
            self._save_last_if_behind(trainer)
            self._stop(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The final state is always resumable and deployable, whatever k is: ``last`` is written
        # even when a best checkpoint was the step's only save so far.
        if (
            self.save_last
            and self._last_step != trainer.global_step
            and not self._skips(trainer, any_save=False)
        ):
            self._save_last(trainer)
        if self._stop_pending or self._interrupt_requested(trainer):
            self._stop(trainer)  # before the module's final evaluation; a resumed run does it
        self._signals.restore()

    # ------------------------------------------------------------------ which
    def _metrics(self, trainer: L.Trainer) -> dict[str, Any]:
        return {**trainer.callback_metrics, "step": trainer.global_step, "epoch": trainer.current_epoch}

    def _path(self, trainer: L.Trainer, name: str) -> str:
        return os.path.join(self.directory(trainer), name + self.FILE_EXTENSION)

    def _save_last(self, trainer: L.Trainer) -> None:
        if self.save_last:
            self.last_model_path = self._path(trainer, self.LAST_NAME)
            self.save(trainer, self.last_model_path)
            self._last_step = trainer.global_step

    def _save_last_if_behind(self, trainer: L.Trainer) -> None:
        if self.last_saved_step != trainer.global_step:
            self._save_last(trainer)

    def _save_recent(self, trainer: L.Trainer) -> None:
        """Without ``monitor``: the ``save_top_k`` most recent periodic checkpoints (``-1``: all)."""
        if self.save_top_k == 0:
            return
        path = self._path(trainer, checkpoint_name(self.filename, self._metrics(trainer)))
        self.save(trainer, path)
        self.best_k_models[path] = torch.tensor(trainer.global_step)
        self.best_model_path = path
        while 0 < self.save_top_k < len(self.best_k_models):
            oldest = next(iter(self.best_k_models))
            del self.best_k_models[oldest]
            if oldest != path:
                self.remove(trainer, oldest)

    def _save_best(self, trainer: L.Trainer) -> None:
        """With ``monitor``: keep this checkpoint if it is among the ``save_top_k`` best."""
        if self.save_top_k == 0:
            return
        metrics = self._metrics(trainer)
        if self.monitor not in metrics:
            rank_zero_warn(
                f"AgonCheckpoint(monitor={self.monitor!r}) found no such metric after validation; logged: "
                f"{sorted(k for k in metrics if isinstance(k, str))}"
            )
            return
        worst = -math.inf if self.mode == "max" else math.inf
        score = torch.as_tensor(metrics[self.monitor]).detach().float().cpu()
        score = torch.tensor(worst) if torch.isnan(score) else score

        def better(a: torch.Tensor, b: torch.Tensor) -> bool:
            return bool(a > b) if self.mode == "max" else bool(a < b)

        full = 0 < self.save_top_k <= len(self.best_k_models)
        kth = min(
            self.best_k_models,
            key=lambda p: self.best_k_models[p] * (1 if self.mode == "max" else -1),
            default=None,
        )
        if full and not better(score, self.best_k_models[kth]):
            return
        path = self._path(trainer, checkpoint_name(self.filename, metrics))
        self.save(trainer, path)
        self.best_k_models[path] = score
        if full and kth != path:
            del self.best_k_models[kth]
            self.remove(trainer, kth)
        self.best_model_path = max(
            self.best_k_models, key=lambda p: self.best_k_models[p] * (1 if self.mode == "max" else -1)
        )
        self.best_model_score = self.best_k_models[self.best_model_path]
        if self.verbose:
            rank_zero_info(f"step {trainer.global_step}: {self.monitor}={float(score):.4f}, saved {path}")

    # ------------------------------------------------------------------ interrupts
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._claim_directory(trainer)
        if self.save_on_interrupt and self.save_last and not trainer.fast_dev_run:
            # Before a first step completes there is nothing to save: a signal stops at once.
            self._signals = StopSignals(defer=lambda: trainer.global_step > 0, timeout_s=self.stop_timeout_s)
            self._signals.install()
        self._stop_pending = False

    def _interrupt_requested(self, trainer: L.Trainer) -> bool:
        """Whether any process got a signal; every process must call this at the same point."""
        if not self.save_on_interrupt:
            return False
        return trainer.strategy.reduce_boolean_decision(self._signals.received is not None, all=False)

    def _stop(self, trainer: L.Trainer) -> None:
        signum = self._signals.received or signal.SIGTERM  # SIGTERM: another process got the signal
        self._signals.restore()
        rank_zero_info(
            f"{signal.Signals(signum).name}: stopped after step {trainer.global_step}; resumable checkpoint "
            f"{self.last_model_path}. To continue, rerun the same command with --ckpt_path last"
        )
        raise Interrupted(signum)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._signals.restore()
        self._lock.release()
        if getattr(exception, "resumable", False):  # e.g. a sampling server that went away
            where = (
                f"--ckpt_path last resumes from {self.last_model_path} (step {self.last_saved_step})"
                if self.last_saved_step >= 0 and self.last_model_path
                else "no checkpoint was written yet: rerun from the start once the cause is fixed"
            )
            rank_zero_info(f"stopped during step {trainer.global_step + 1}: {exception}; {where}")

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._signals.restore()
        self._lock.release()

    # ------------------------------------------------------------------ how
    @property
    def drafter(self) -> str:
        """The ``drafter`` option (kept by the :class:`~callbacks.bundle.BundleWriter`)."""
        return self.bundle_writer.drafter

    def drafter_for_bundle(self, trainer: L.Trainer) -> str | None:
        """The adapter that drafts in the bundle written now (see ``drafter``; ``None``: the game's answer graph)."""
        return self.bundle_writer.drafter_for(trainer)

    def save(self, trainer: L.Trainer, filepath: str) -> None:
        """Write the resume state to ``filepath`` atomically, its digest and the adapter bundle beside it.

        Every process calls this (the state and the adapters are gathered); rank zero writes.
        """
        partial = os.path.join(os.path.dirname(filepath), f".{os.path.basename(filepath)}{PARTIAL_SUFFIX}")
        trainer.save_checkpoint(partial, self.save_weights_only)
        # Whole adapters on every rank (a collective under sharding), written by rank zero alone.
        adapters = self.bundle_writer.gather(trainer) if self.bundles else None
        if trainer.is_global_zero:
            publish_with_digest(partial, filepath, publish)
            if adapters is not None:
                self.bundle_writer.write(trainer, filepath, adapters)
        trainer.strategy.barrier("AgonCheckpoint.save")
        self.last_saved_step = trainer.global_step
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))

    def remove(self, trainer: L.Trainer, filepath: str) -> None:
        """Delete a checkpoint that is no longer kept, and its bundle."""
        trainer.strategy.remove_checkpoint(filepath)
        if trainer.is_global_zero:
            remove_digests(filepath)
            self.bundle_writer.remove(filepath)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The best-checkpoint record, in ``ModelCheckpoint``'s fields."""
        return {
            "monitor": self.monitor,
            "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path,
            "dirpath": self.dirpath,
            "best_k_models": self.best_k_models,
            "last_model_path": self.last_model_path,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("dirpath", self.dirpath) == self.dirpath:
            self.best_model_score = state_dict.get("best_model_score")
            self.best_k_models = dict(state_dict.get("best_k_models", {}))
            self.last_model_path = state_dict.get("last_model_path", "")
        else:
            rank_zero_warn(
                f"the checkpoint directory changed from {state_dict.get('dirpath')!r} to {self.dirpath!r}: "
                "only best_model_path is carried over"
            )
        self.best_model_path = state_dict.get("best_model_path", "")

    # ------------------------------------------------------------------ RNG
    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Every process samples its own rollouts: keep each one's generators, by global rank.
        states = collect_rng_states()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, states)
        else:
            gathered = [states]
        checkpoint[RNG_KEY] = gathered

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        states = checkpoint.get(RNG_KEY)
        if states is None:
            rank_zero_warn(f"the checkpoint holds no {RNG_KEY!r}: sampling will not continue exactly")
        elif len(states) != trainer.world_size:
            rank_zero_warn(
                f"the checkpoint holds the RNG states of {len(states)} processes and this run has "
                f"{trainer.world_size}: sampling will not continue exactly"
            )
        else:
            self._rng_to_restore = states[trainer.global_rank]

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._stop_pending:
            self._stop(trainer)
        if self._rng_to_restore is not None:
            set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None
