"""Keep the memory a CPU step frees for the next step, instead of handing it back to the kernel.

glibc's ``malloc`` serves a block of more than ``M_MMAP_THRESHOLD`` bytes (128 KiB at first,
adjusted as the program runs) with a fresh ``mmap`` and unmaps it on ``free``; smaller blocks
come from the heap, whose top is returned to the kernel once more than ``M_TRIM_THRESHOLD`` is
free there. A training step on the CPU allocates and frees activations of a few MB to tens of
MB in every layer, forward and backward, so the same memory is unmapped and mapped again all
step long, and the kernel zeroes every page again on its first touch: measured on the default
job's shape (16 × 8 rollouts of 80 tokens, tiny Qwen3, one thread), about 100,000 page faults
per update and 7% of its CPU time (``python -m benchmarks.bench_levers --allocator --prompts 16
--generations 8 --max-new-tokens 80 --repeats 4``).
With blocks up to 32 MiB (glibc's largest threshold) served from the heap and the heap kept,
the faults stop after the first step. The price: the process keeps its peak heap instead of
shrinking between steps; tensors above 32 MiB are still mapped and unmapped as before.

Only the ``agon`` command calls :func:`reuse_freed_memory` (a library does not change the
allocator of the process it is imported into); set ``AGON_MALLOC=default`` to leave glibc's
defaults. On another C library or platform it does nothing. CUDA memory has its own caching
allocator and is not affected.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # the largest glibc accepts on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30
ENV = "AGON_MALLOC"


def reuse_freed_memory() -> bool:
    """Serve blocks up to 32 MiB from the heap and keep up to 1 GiB of it free; whether it took effect.

    Does nothing (returns ``False``) outside Linux, with a C library without ``mallopt``, or when
    ``AGON_MALLOC=default``.
    """
    if not sys.platform.startswith("linux") or os.environ.get(ENV, "").lower() == "default":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; a library that only pretends to have it returns 0.
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
