"""Callbacks for Agon runs: exact-resume checkpoints, trace lengths, divergence, sample tables, progress lines.

``agon fit`` adds every one of them to every run (:func:`standard_callbacks`); each reads ``AgonModule.last_record`` (what the last
training step played) rather than generating again, except the divergence probe, which runs
a few forward passes every k steps.
"""

from .checkpoint import AgonCheckpoint
from .defaults import STANDARD, standard_callbacks, validate_callbacks
from .divergence import DivergenceMonitor
from .outputs import RunOutputs
from .progress_log import ProgressLog
from .report import ValidationReport
from .samples import SampleTable
from .trace_length import TraceLengthMonitor, plot_trace_lengths

__all__ = [
    "AgonCheckpoint",
    "DivergenceMonitor",
    "ProgressLog",
    "RunOutputs",
    "STANDARD",
    "SampleTable",
    "TraceLengthMonitor",
    "ValidationReport",
    "plot_trace_lengths",
    "standard_callbacks",
    "validate_callbacks",
]
