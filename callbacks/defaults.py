"""The callbacks every training run gets, from one place.

A run needs a line on its model, its checkpoint bundle (saved on a signal, resumable), progress lines where stdout is
a log file, the validation report with ``outcomes.jsonl``, trace-length and divergence
monitoring, sample games and a last word on where all of it went. Listing them in each config
let configs drop them by accident (the real-model configs carried none), so ``agon fit`` adds
:func:`standard_callbacks` to whatever a config lists: a callback the config lists with its own
settings replaces the standard one of its class, and ``--skip_callbacks`` names any to leave out
(configured or standard).
A script builds the same set with ``L.Trainer(callbacks=standard_callbacks())``.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L

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
    unknown = sorted(set(skip) - set(STANDARD_NAMES))
    if unknown:
        raise ValueError(
            f"skip_callbacks: {unknown} are not standard callbacks; standard: {list(STANDARD_NAMES)}"
        )
    given = {type(cb) for cb in configured}
    return [
        cls() for cls in STANDARD if cls.__name__ not in skip and not any(issubclass(g, cls) for g in given)
    ]
