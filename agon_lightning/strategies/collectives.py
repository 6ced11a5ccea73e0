"""Sums over every process of a run, for state that each process must keep alike."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def sum_over_processes(values: Tensor) -> Tensor:
    """``values`` summed over every process of the run; as they are outside a distributed run.

    Every process must call it at the same point (it is a collective). Under NCCL the sum runs on
    this process's GPU; the result comes back on ``values``' device, detached.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values.detach().clone()
    device = values.device
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    total = values.detach().to(device, copy=True)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.to(values.device)
