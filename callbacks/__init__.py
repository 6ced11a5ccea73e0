"""Callbacks for Agon runs: exact-resume checkpoints, trace lengths, divergence, sample tables, progress lines.

All are on in ``configs/agon.yaml``; each reads ``AgonModule.last_record`` (what the last
training step played) rather than generating again, except the divergence probe, which runs
a few forward passes every k steps.
"""

from .checkpoint import AgonCheckpoint
from .divergence import DivergenceMonitor
from .progress_log import ProgressLog
from .report import ValidationReport
from .samples import SampleTable
from .trace_length import TraceLengthMonitor, plot_trace_lengths

__all__ = [
    "AgonCheckpoint",
    "DivergenceMonitor",
    "ProgressLog",
    "SampleTable",
    "TraceLengthMonitor",
    "ValidationReport",
    "plot_trace_lengths",
]
