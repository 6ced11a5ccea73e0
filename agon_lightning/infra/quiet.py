"""What a run's log leaves out: messages from our dependencies that no user of ``agon`` can act on.

A log should hold what the run did and what the user could change. Warnings our own code
triggered are fixed where they arise (``adapters/shared_prompt.py`` reads transformers' current
name for activation checkpointing; :class:`~agon_lightning.callbacks.summary.AdapterSummary`
replaces Lightning's table of ``FLOPs 0``; ``from_config`` records the objects it is given as
specs, which jsonargparse can serialize). What remains comes from inside a dependency, from
code no setting of ours reaches; it is dropped here, in this one place, each by its own message,
so that anything else those dependencies say still reaches the log.

Every entry point that loads a base calls :func:`quiet_dependency_noise` first: the LightningCLI
commands (``agon fit``, ``sft``, ``predict --config``, and ``from_config`` through their parser) and
:meth:`Cascade.from_pretrained <agon_lightning.deploy.cascade.Cascade.from_pretrained>` (``agon
predict --bundle``, ``agon serve``). It sits below them all, in ``infra/``, so that the deployed
cascade needs nothing of the CLI.
"""

from __future__ import annotations

import logging
import sys
import warnings


class _DropMessages(logging.Filter):
    """Drops the records of one logger whose message starts with one of ``prefixes``."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


# logger → the message starts it drops, and why each is not the user's to act on
DROPPED_RECORDS: dict[str, tuple[str, ...]] = {
    "lightning.pytorch.utilities.rank_zero": (
        # suggestions of other products, not of anything this run could do differently
        "💡 Tip:",
        # AdapterSummary, our one-line model summary, is in every fit; Lightning notes it found one
        "Trainer already configured with model summary callbacks",
    ),
    # DeepSpeed (the `deepspeed` extra) warns on import where no GPU is found; accelerate imports
    # it inside transformers' save_pretrained. Lightning's "GPU available: False" already says so.
    "DeepSpeed": ("Setting accelerator to CPU",),
}

# (message regex, category): warnings raised inside a dependency about that dependency's own calls
DROPPED_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    # Lightning's utilities/_pytree.py uses a torch pytree API that torch deprecated.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", Warning),
    # PEFT's peft_model.py reads transformers' deprecated `is_gradient_checkpointing` when it wraps the base.
    (r"`is_gradient_checkpointing` is deprecated", FutureWarning),
)


def quiet_dependency_noise() -> None:
    """Install the filters above (idempotent); where stderr is a file, no transformers progress bars.

    transformers' "Loading weights" and "Writing model shards" bars are one line of carriage
    returns in a log file (SLURM, ``> log 2>&1``); on a terminal they stay.
    """
    for name, prefixes in DROPPED_RECORDS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) for f in logger.filters):
            logger.addFilter(_DropMessages(*prefixes))
    for message, category in DROPPED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    if not sys.stderr.isatty():
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
