"""Adapter snapshots: an adapter's weights as they were some updates ago, kept on the CPU.

A snapshot is adapter-only (the LoRA tensors, megabytes even on a 0.6B base). To run a forward
with one, it is copied into a *slot*: a frozen LoRA adapter of the same shape attached beside
the trained ones (``alpha_ref``), never trained, never saved as an adapter of the run and never
pushed to a sampling server. The slots are attached once, with the trained adapters; what they
hold changes by copy.

:class:`AdapterHistory` keeps each adapter's last few versions, numbered by the updates the
adapters have taken (the module's ``policy_version``), and goes into checkpoints whole, so a
resumed run reads the same past weights as an uninterrupted one. :func:`check_adapter_state`
checks that a checkpoint's adapter tensors are the run's, before they load.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from agon_lightning.strategies.gather import of_adapter

SLOT_KINDS = ("ref", "league")  # a KL reference's slot; a past rival's


def slot_of(adapter: str, kind: str = "ref") -> str:
    """The frozen slot that holds a snapshot of ``adapter`` (``alpha`` → ``alpha_ref``, ``alpha_league``)."""
    if kind not in SLOT_KINDS:
        raise ValueError(f"slot kind must be one of {SLOT_KINDS}, got {kind!r}")
    return f"{adapter}_{kind}"


def is_slot(name: str) -> bool:
    """Whether an adapter of the model is a snapshot slot, not a policy of the run."""
    return name.endswith(tuple(f"_{kind}" for kind in SLOT_KINDS))


def policies_of(model: nn.Module) -> list[str]:
    """The model's adapters that are policies (what a sampling server holds), without the snapshot slots."""
    return [name for name in model.peft_config if not is_slot(name)]


def _key(param_name: str, adapter: str) -> str:
    return param_name.replace(f".{adapter}.", ".*.")


def adapter_state(model: nn.Module, adapter: str) -> dict[str, Tensor]:
    """``adapter``'s LoRA tensors, copied to the CPU, keyed by parameter name with the adapter's name as ``*``."""
    state = {
        _key(n, adapter): p.detach().to("cpu", copy=True)
        for n, p in model.named_parameters()
        if of_adapter(n, adapter)
    }
    if not state:
        raise ValueError(f"adapter {adapter!r} has no parameters in this model")
    return state


@torch.no_grad()
def load_into(model: nn.Module, slot: str, state: dict[str, Tensor]) -> None:
    """Copy a snapshot (:func:`adapter_state`) into the adapter ``slot``; every tensor of the slot must be in it."""
    seen = 0
    for n, p in model.named_parameters():
        if of_adapter(n, slot):
            key = _key(n, slot)
            if key not in state:
                raise KeyError(f"the snapshot has no tensor for {key!r} (slot {slot!r})")
            p.copy_(state[key].to(p.device, p.dtype))
            seen += 1
    if seen != len(state):
        raise ValueError(f"slot {slot!r} holds {seen} tensors, the snapshot {len(state)}")


class AdapterHistory:
    """Each adapter's weights at its last ``depth`` + 1 versions (CPU copies), by version.

    ``record`` after every update (and once before the first); ``at(adapter, v)`` is the
    adapter as it was at version ``v``, or at the oldest version kept when ``v`` is older (at
    the start of training: the adapter's initial weights).
    """

    def __init__(self, depth: int) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.depth = depth
        self.states: dict[str, dict[int, dict[str, Tensor]]] = {}

    def record(self, model: nn.Module, adapter: str, version: int) -> None:
        """Keep ``adapter``'s current weights as version ``version``; drop what no reader can ask for any more."""
        kept = self.states.setdefault(adapter, {})
        kept[version] = adapter_state(model, adapter)
        for old in [v for v in kept if v < version - self.depth]:
            del kept[old]

    def keep(self, model: nn.Module, adapters: tuple[str, ...], version: int) -> None:
        """:meth:`record` each of ``adapters`` at ``version`` unless it is kept already."""
        for name in adapters:
            if version not in self.states.get(name, {}):
                self.record(model, name, version)

    def versions(self, adapter: str) -> list[int]:
        """The versions of ``adapter`` kept, oldest first."""
        return sorted(self.states.get(adapter, {}))

    def at(self, adapter: str, version: int) -> tuple[int, dict[str, Tensor]]:
        """``(version read, weights)``: ``adapter`` at ``version``, or at the oldest version kept if that is later."""
        kept = self.states.get(adapter)
        if not kept:
            raise KeyError(f"no snapshot of adapter {adapter!r} was recorded")
        older = [v for v in kept if v <= version]
        chosen = max(older) if older else min(kept)
        return chosen, kept[chosen]

    def state_dict(self) -> dict[str, Any]:
        return {"depth": self.depth, "states": self.states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["depth"]) != self.depth:
            raise ValueError(
                f"the checkpoint kept {state['depth']} versions of each adapter, this run keeps {self.depth}: "
                "the reference's age changed since it was written"
            )
        self.states = {a: {int(v): s for v, s in kept.items()} for a, kept in state["states"].items()}


def check_adapter_state(expected: dict[str, list[str]], state: dict[str, Any], meta: dict[str, Any]) -> None:
    """Raise unless ``state`` holds every tensor of every adapter in ``expected`` (and no other adapter).

    Checkpoints hold only the adapters and load with ``strict=False`` (the frozen base is not in
    them), so without this check a checkpoint missing an adapter would restore as nothing.
    """
    problems = []
    for name, keys in expected.items():
        missing = [k for k in keys if k not in state]
        if missing:
            problems.append(
                f"adapter {name!r}: {len(missing)} of {len(keys)} tensors missing (e.g. {missing[0]})"
            )
    known = {k for keys in expected.values() for k in keys}
    extra = sorted({k for k in state if k not in known})
    if extra:
        problems.append(f"{len(extra)} tensors of adapters this run does not have (e.g. {extra[0]})")
    if problems:
        saved = meta.get("adapters")
        raise ValueError(
            "the checkpoint does not match this run's adapters "
            f"{sorted(expected)}"
            + (f" (it was saved with {saved})" if saved else "")
            + ": "
            + "; ".join(problems)
        )
