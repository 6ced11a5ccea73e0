"""Sampling: the ``Rollout`` interface and its backends.

- :mod:`~agon_lightning.rollout.hf`: the ``Rollout`` interface, ``RolloutBatch`` and the
  Hugging Face backend (``HFRollout``), which samples through our own decode loop;
- :mod:`~agon_lightning.rollout.decode_loop`: that loop (token by token, finished rows
  dropped, the prompt's cache shared across a group);
- :mod:`~agon_lightning.rollout.vllm`: the vLLM backend (``VLLMRollout``).

The interface is importable from the package itself (``from agon_lightning.rollout import
Rollout``), and ``agon_lightning.rollout.HFRollout`` — the class path configs and bundles
written before the backends had modules of their own — resolves to the same class. The names
load on first use, so importing one backend does not load the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Rollout": "agon_lightning.rollout.hf",
    "RolloutBatch": "agon_lightning.rollout.hf",
    "HFRollout": "agon_lightning.rollout.hf",
    "stop_token_ids": "agon_lightning.rollout.hf",
    "completion_mask": "agon_lightning.rollout.hf",
    "encode_prompts": "agon_lightning.rollout.hf",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
