"""A recorder of what must be identical on every rank: collectives and hooked module calls, per step.

Work whose amount differs between ranks (lengths sampled, valid rows, skipped groups) must
never reach something every rank has to do alike: a collective (one rank waiting in it alone
hangs) or, under DeepSpeed ZeRO-3, a call of a hooked module (each is appended to the step's
module trace, which ZeRO-3 compares across ranks at the next forward and refuses to continue
on). :class:`CallTrace` records, per rank and per step (a training batch, a validation epoch):

* every call of a ``torch.distributed`` collective, as ``dist.name(shape, ...)`` (the
  outermost call only: a collective implemented with others is one entry);
* under ZeRO-3, every call of a module that DeepSpeed hooked (it carries a ``ds_id``), as
  ``module path.of.it (Class)``;

and at the end of each step compares the records of all ranks (one ``all_gather_object`` of
its own, not recorded). The first difference is kept as one line naming the step, the position
and the call on each rank, and training stops there: before the next forward, where ZeRO-3
would crash or a collective would hang. :func:`first_difference` is the comparison.
"""

from __future__ import annotations

import functools
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from torch import nn

# torch.distributed's collectives and point-to-point calls (those a torch version lacks are skipped).
# Not seen: collectives issued from C++ (DDP's gradient all-reduce: one per bucket, alike on every
# rank) and torch's functional collectives (DTensor's full_tensor).
COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "broadcast", "broadcast_object_list", "all_gather",
    "all_gather_coalesced", "all_gather_into_tensor", "all_gather_single", "all_gather_object", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier", "gather", "gather_object", "scatter", "scatter_object_list", "send",
    "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list",
)  # fmt: skip


def first_difference(records: list[list[str]]) -> str | None:
    """The first call at which the ranks' records differ, as one line; ``None`` when all are equal."""
    width = max(len(r) for r in records)
    for i in range(width):
        calls = [r[i] if i < len(r) else "(nothing: its record ends here)" for r in records]
        if len(set(calls)) > 1:
            ranks = "; ".join(f"rank {k}: {c}" for k, c in enumerate(calls))
            lengths = ", ".join(str(len(r)) for r in records)
            return f"call {i} differs ({ranks}); calls per rank: {lengths}"
    return None


def _describe(name: str, args: tuple, kwargs: dict) -> str:
    if name.endswith("_object") or name.endswith("_object_list"):
        return f"dist.{name}"  # pickled sizes may differ legitimately
    shapes = [tuple(a.shape) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    for a in (*args, *kwargs.values()):  # tensor lists (all_gather's outputs)
        if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            shapes.append(f"{len(a)}x{tuple(a[0].shape)}")
    return f"dist.{name}({', '.join(map(str, shapes))})"


class CallTrace(L.Callback):
    """Record collectives and ZeRO-3-hooked module calls per step; compare the ranks at each step's end.

    Attributes:
        divergence: The first difference found, as one line (``None``: every step was equal).
        steps: How many steps were compared.
        counts: Per step, ``(collectives, hooked module calls)`` on this rank.
    """

    def __init__(self) -> None:
        self.divergence: str | None = None
        self.steps = 0
        self.counts: list[tuple[int, int]] = []
        self._calls: list[str] | None = None
        self._depth = 0
        self._originals: dict[str, Any] = {}
        self._hook: Any = None
        self._names: dict[int, str] = {}

    # ------------------------------------------------------------------ recording
    def _wrap(self, name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if self._calls is not None and self._depth == 0:
                self._calls.append(_describe(name, args, kwargs))
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1

        return recorded

    def _module_call(self, module: nn.Module, _args: Any) -> None:
        if self._calls is not None and hasattr(module, "ds_id"):
            self._calls.append(f"module {self._names.get(id(module), '?')} ({type(module).__name__})")

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for name in COLLECTIVES:
            fn = getattr(dist, name, None)
            if fn is not None and name not in self._originals:
                self._originals[name] = fn
                setattr(dist, name, self._wrap(name, fn))
        self._hook = nn.modules.module.register_module_forward_pre_hook(self._module_call)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for name, fn in self._originals.items():
            setattr(dist, name, fn)
        self._originals.clear()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    # ------------------------------------------------------------------ steps
    def _start(self, pl_module: L.LightningModule) -> None:
        if not self._names:
            self._names = {id(m): n or "(root)" for n, m in pl_module.named_modules()}
        self._calls = []

    def _end(self, trainer: L.Trainer, what: str) -> None:
        calls, self._calls = self._calls or [], None
        hooked = sum(1 for c in calls if c.startswith("module "))
        self.counts.append((len(calls) - hooked, hooked))
        records: list[Any] = [None] * trainer.world_size
        gather = self._originals.get("all_gather_object", dist.all_gather_object)
        if trainer.world_size > 1:
            gather(records, calls)
        else:
            records = [calls]
        self.steps += 1
        diff = first_difference(records)
        if diff is not None and self.divergence is None:
            self.divergence = f"{what}: {diff}"
            trainer.should_stop = True  # every rank saw the same records: all stop here

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._start(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._end(trainer, f"training step {batch_idx}")

    def on_validation_start(self, trainer, pl_module):
        self._start(pl_module)

    def on_validation_end(self, trainer, pl_module):  # after the module's epoch end (its metrics' sync)
        self._end(trainer, "validation")
