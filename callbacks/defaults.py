"""The callbacks every training run gets, from one place.

A run needs a line on its model, its checkpoint bundle (saved on a signal, resumable), progress lines where stdout is
a log file, the validation report with ``outcomes.jsonl``, trace-length and divergence
monitoring, sample games and a last word on where all of it went. Listing them in each config
let configs drop them by accident (the real-model configs carried none), so ``agon fit`` adds
:func:`standard_callbacks` to whatever a config lists: a callback the config lists with its own
settings replaces the standard one of its class, and ``--skip_callbacks`` names any to leave out
(configured or standard).
A script builds the same set with ``L.Trainer(callbacks=standard_callbacks())``.

``agon validate`` gets the validation report alone (:func:`validate_callbacks`), so its
``outcomes.jsonl`` is written whatever the config lists.

``agon sft`` trains a whole model, not the game, so it gets the part of the set that applies
(:func:`sft_callbacks`): the model line, progress lines, ``last.ckpt`` every 50 steps in
``<default_root_dir>/checkpoints`` (``--ckpt_path last`` resumes) and the closing list.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint, ModelSummary

from .checkpoint import AgonCheckpoint
from .divergence import DivergenceMonitor
from .outputs import RunOutputs
from .progress_log import ProgressLog
from .report import ValidationReport
from .samples import SampleTable
from .summary import AdapterSummary
from .trace_length import TraceLengthMonitor

# The standard set, in the order the trainer runs them (RunOutputs last: it reports the others' files).
STANDARD: tuple[type[L.Callback], ...] = (
    AdapterSummary,
    ProgressLog,
    ValidationReport,
    TraceLengthMonitor,
    DivergenceMonitor,
    SampleTable,
    AgonCheckpoint,
    RunOutputs,
)
STANDARD_NAMES = tuple(cls.__name__ for cls in STANDARD)


def standard_callbacks(configured: Sequence[L.Callback] = (), skip: Sequence[str] = ()) -> list[L.Callback]:
    """The standard callbacks (default settings) whose class ``configured`` does not already hold.

    Args:
        configured: Callbacks given otherwise (a config's ``trainer.callbacks``); each replaces the
            standard one of its class.
        skip: Class names of standard callbacks to leave out (e.g. ``["DivergenceMonitor"]``).

    Raises:
        ValueError: ``skip`` names a class that is not standard.
    """
    return missing([cls() for cls in STANDARD], configured, skip)


def validate_callbacks(configured: Sequence[L.Callback] = (), skip: Sequence[str] = ()) -> list[L.Callback]:
    """What every ``agon validate`` gets, as :func:`standard_callbacks` for ``agon fit``: the
    validation report, which writes ``outcomes.jsonl`` (the evaluation problem by problem, what
    paired comparisons between runs read), unless configured otherwise or skipped. ``skip`` may name
    any of ``agon fit``'s standard callbacks (one set of overrides serves both commands); a name
    that is standard nowhere is an error."""
    relevant = [name for name in skip if name not in STANDARD_NAMES or name == ValidationReport.__name__]
    return missing([ValidationReport()], configured, relevant)


SFT_CHECKPOINT_EVERY_N_STEPS = 50


def sft_callbacks(
    configured: Sequence[L.Callback] = (), skip: Sequence[str] = (), default_root_dir: str = "."
) -> list[L.Callback]:
    """What every ``agon sft`` run gets, as :func:`standard_callbacks` for ``agon fit``.

    A one-line model summary, progress lines where stdout is a log, ``last.ckpt`` every
    :data:`SFT_CHECKPOINT_EVERY_N_STEPS` steps in ``<default_root_dir>/checkpoints`` (not the
    logger's versioned folder, so a restarted run finds it) and the closing list of outputs.

    Args:
        configured: As in :func:`standard_callbacks` (any ``ModelCheckpoint`` replaces ours).
        skip: Class names to leave out: ``AdapterSummary``, ``ProgressLog``, ``ModelCheckpoint``,
            ``RunOutputs``.
        default_root_dir: The trainer's ``default_root_dir``.

    Raises:
        ValueError: ``skip`` names a class that is not in the set.
    """
    checkpoint = ModelCheckpoint(
        dirpath=os.path.join(default_root_dir, "checkpoints"),
        save_last=True,
        save_top_k=0,
        every_n_train_steps=SFT_CHECKPOINT_EVERY_N_STEPS,
    )
    return missing([AdapterSummary(), ProgressLog(), checkpoint, RunOutputs()], configured, skip)


def trainer_callbacks(
    trainer: Mapping[str, Any],
    standard: Callable[[Sequence[L.Callback], Sequence[str]], list[L.Callback]],
    skip: Sequence[str] = (),
) -> list[L.Callback]:
    """What a CLI hands the trainer: the callbacks its config lists, then the standard ones it lacks.

    Args:
        trainer: The trainer's settings as parsed, callbacks instantiated (``trainer.callbacks``,
            ``enable_model_summary``, ``enable_checkpointing``).
        standard: :func:`standard_callbacks` or :func:`sft_callbacks` (``(configured, skip)``).
        skip: ``--skip_callbacks``: class names to leave out, configured or standard.

    A trainer whose ``enable_model_summary`` or ``enable_checkpointing`` is false gets no summary
    or checkpoint callback, listed or standard (Lightning refuses them there): the flag turns it off.

    Raises:
        ValueError: ``skip`` names a class that is not in the set.
    """
    off = tuple(
        cls
        for key, cls in (("enable_model_summary", ModelSummary), ("enable_checkpointing", Checkpoint))
        if trainer.get(key) is False
    )
    kept = [cb for cb in trainer.get("callbacks") or [] if type(cb).__name__ not in skip]
    return [cb for cb in kept + standard(kept, skip) if not isinstance(cb, off)]


def missing(
    standard: Sequence[L.Callback], configured: Sequence[L.Callback], skip: Sequence[str]
) -> list[L.Callback]:
    """The callbacks of ``standard`` whose class is neither in ``skip`` nor held by ``configured``."""
    names = [type(cb).__name__ for cb in standard]
    unknown = sorted(set(skip) - set(names))
    if unknown:
        raise ValueError(f"skip_callbacks: {unknown} are not standard callbacks; standard: {names}")
    given = {type(cb) for cb in configured}
    return [
        cb
        for cb in standard
        if type(cb).__name__ not in skip and not any(issubclass(g, type(cb)) for g in given)
    ]
